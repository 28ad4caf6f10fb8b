// fs/entries: the blocking filesystem work behind E2B's filesystem service
// (execd/api/envd/filesystem), with envd's semantics where they differ from
// the OpenSandbox API's (fs/ops): paths resolve against the user's home,
// a symlink reports its target's type, a listing walks to a depth in
// lexical order, a move replaces its destination, directories made on the
// way belong to the user. Threadpool only.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fs/error.h"

namespace execd::fs {

struct Entry {
  std::string path;  // as reported (under the path the client named)
  std::string name;
  struct stat st {};      // lstat
  bool is_symlink = false;
  bool target_ok = false;  // a symlink whose target exists
  struct stat target {};   // stat of that target
  std::string resolved;    // a symlink's target, all links followed (itself if it dangles)
};

// envd's ExpandAndResolve: "~" and "~/x" are the home, a relative path is
// relative to the home, then lexically cleaned. Empty: the home.
std::string resolve_user_path(std::string_view path, const std::string& home);

// lstat (and stat of a symlink's target). ENOENT -> not_found.
Result<Entry> stat_entry(const std::string& path);

// The entries under `real_root` down to `depth` levels (1: its children), in
// lexical order, each directory's entries right after it; symlinks are
// listed, never entered; a directory that cannot be read is listed, not
// entered. Reported paths are `shown_root` joined with the relative path.
// More than `max_entries`: a no_space error, and the walk stops there.
Result<std::vector<Entry>> walk_entries(const std::string& shown_root, const std::string& real_root, int depth,
                                        size_t max_entries);

// mkdir -p; the directories it creates get `uid`/`gid` when given.
Status make_dirs_owned(const std::string& path, std::optional<uid_t> uid, std::optional<gid_t> gid);

// rename(2), replacing a destination file (envd's os.Rename); the
// destination's parent is made first (make_dirs_owned).
Status rename_replacing(const std::string& from, const std::string& to, std::optional<uid_t> uid,
                        std::optional<gid_t> gid);

}  // namespace execd::fs
