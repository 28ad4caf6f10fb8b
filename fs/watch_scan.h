// fs/watch_scan: the blocking file work behind the file-change feed and
// track_changes (execd/watch), run on the threadpool: resolving a root,
// adding inotify watches to a directory tree (inotify_add_watch is a path
// lookup, so it is file work too), lstat of a changed entry, and the SHA-256
// of a changed file. Never follows a symlink below the root.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "protocol/watch.h"

namespace execd::fs {

// lstat, as the feed reports an entry (exists false when it is gone).
protocol::EntryStat stat_for_watch(const std::string& path);

// A watch root: `$VAR`/`~` expanded, absolute, symlinks resolved (the root
// may be a link to a directory; nothing below it is followed). `error` set
// (and `status`: 400, 404, 403) when it is not a directory execd can read.
struct ResolvedRoot {
  std::string path;
  std::string error;
  int status = 0;
};
ResolvedRoot resolve_watch_root(const std::string& given);

struct ScannedDir {
  int wd;
  std::string path;
};
struct TreeScan {
  std::vector<ScannedDir> dirs;  // every directory now watched, `dir` first
  // Entries found below `dir` (listed when asked): what a new directory
  // already held when its watch was added.
  std::vector<std::pair<std::string, protocol::EntryType>> entries;
  bool dir_limit = false;  // stopped at max_dirs
  std::string first_unwatched;  // where it stopped
  int error = 0;           // errno of the watch on `dir` itself (0: fine)
};
// Adds a watch (`mask`) to `dir` and, when `recursive`, to every directory
// below it (breadth first, no symlinks followed), at most `max_dirs` in all.
// A subdirectory that vanishes meanwhile is skipped.
TreeScan watch_tree(int inotify_fd, const std::string& dir, uint32_t mask, bool recursive, size_t max_dirs,
                    bool list_entries, size_t max_entries);

// The lowercase hex SHA-256 of a regular file's contents (read without
// following a final symlink); empty when it cannot be read or is larger
// than `max_bytes` (then `too_large` is set).
std::string sha256_of_file(const std::string& path, uint64_t max_bytes, bool& too_large);

}  // namespace execd::fs
