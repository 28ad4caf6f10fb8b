// fs/archive: directory archives, blocking, run on the threadpool (through
// the file gate) by execd/api/archive. Debian's libarchive does the formats:
// tar (pax: long names, large and sparse files), tar.gz and zip.
//
// * DirArchiver walks a directory (symlinks stored as symlinks and never
//   followed; hard links stored once, then as links in tar; sparse files
//   with their holes in tar) and produces the archive a piece at a time, so
//   that the caller streams it with backpressure and no copy of the tree.
// * extract_archive unpacks a tar (plain or compressed) or zip file into a
//   new directory next to the target and renames it into place only when
//   every entry was valid: absolute paths, `..`, links that point out of the
//   target, writing through a symlink, device files, FIFOs and sockets are
//   refused, and so is passing the entry or byte limit; a refusal leaves
//   nothing behind.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "fs/error.h"
#include "fs/permissions.h"

struct archive;  // libarchive's handles, kept opaque
struct archive_entry_linkresolver;

namespace execd::fs {

enum class ArchiveFormat { tar, tar_gz, zip };
std::optional<ArchiveFormat> archive_format_from_name(const std::string& name);
const char* archive_content_type(ArchiveFormat f);
const char* archive_extension(ArchiveFormat f);

class DirArchiver {
 public:
  // The directory is checked and opened here; `path` is used as given
  // (the caller expands it).
  static Result<std::unique_ptr<DirArchiver>> open(const std::string& path, ArchiveFormat format);
  ~DirArchiver();
  DirArchiver(const DirArchiver&) = delete;
  DirArchiver& operator=(const DirArchiver&) = delete;

  // Appends at least `want` bytes of the archive to `out` (fewer only at
  // its end, when `finished()` becomes true). An entry that cannot be read,
  // or a file whose size changes while it is read (its header already
  // gave the old size), is an error: the archive cannot be completed
  // honestly. A grown file's last block is not appended, so that the bytes
  // produced before the error end inside its member.
  Status produce(std::string& out, size_t want);
  bool finished() const { return finished_; }
  uint64_t entries() const { return entries_; }

 private:
  DirArchiver() = default;
  static const char* user_name(void* self, int64_t id);
  static const char* group_name(void* self, int64_t id);
  Status next_entry();
  Status copy_data(std::string& out, size_t want);
  Status check_size_unchanged() const;

  ::archive* disk_ = nullptr;
  ::archive* writer_ = nullptr;
  ::archive_entry_linkresolver* links_ = nullptr;
  std::string root_;
  std::string* sink_ = nullptr;  // where the writer's callback appends
  bool in_data_ = false;         // an entry's data is being copied
  uint64_t data_at_ = 0;         // logical offset reached in that entry
  uint64_t data_size_ = 0;       // its size when its header was written
  std::string data_path_;        // its path on disk, and which file it was
  uint64_t data_dev_ = 0, data_ino_ = 0;
  bool fill_holes_ = true;       // zip: holes become zeros
  bool finished_ = false;
  uint64_t entries_ = 0;
  // Owner and group names by id (fs/accounts), as libarchive asks for them
  // (it copies each name into its entry at once); at most kNamesKept each.
  static constexpr size_t kNamesKept = 256;
  std::map<int64_t, std::optional<std::string>> user_names_, group_names_;
};

struct ExtractOptions {
  ResolvedPermissions owner;  // uid/gid applied to every entry; mode to the target directory
  bool replace = false;       // an existing non-empty target is swapped out and removed
  uint64_t max_entries = 100000;
  uint64_t max_bytes = 4ull << 30;
  const std::atomic<bool>* cancelled = nullptr;  // the client left: stop early
};

struct ExtractResult {
  uint64_t entries = 0, files = 0, directories = 0, symlinks = 0, hardlinks = 0;
  uint64_t bytes = 0;
  std::string format;  // as libarchive names it
  bool replaced = false;
};

// Extracts the archive in the file open as `archive_fd` (read from its
// start; not closed) to `target` (absolute).
// Errors: bad_request (a refused entry: the message names it and why),
// too_large (a limit), exists (target not empty and not `replace`),
// and the file system's own.
Result<ExtractResult> extract_archive(int archive_fd, const std::string& target,
                                      const ExtractOptions& options);

}  // namespace execd::fs
