// fs/atomic_file.h — crash-safe file replacement for uploads and replace:
// write into a temp file in the target's directory, fsync, apply mode and
// owner, rename over the target, fsync the directory.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "fs/error.h"
#include "fs/permissions.h"

namespace execd::fs {

class AtomicFile {
 public:
  // Prepares a temp file next to `target_path` (creating missing parent
  // directories with 0777 & ~umask). Owner/group names are resolved here, so an
  // unknown name fails before any byte is written.
  //
  // Final attributes: the spec's mode/owner when given; otherwise those of the
  // existing target (mode kept; owner kept best-effort); otherwise a new file
  // gets 0777 & ~umask (the Go daemon's default) and execd's uid/gid.
  // An existing symlink target is resolved and the file it points to is
  // replaced (the Go daemon writes through symlinks); a dangling symlink is
  // replaced by the file. A directory target is a conflict.
  static Result<AtomicFile> open(const std::string& target_path, const PermissionSpec& spec = {});

  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&& other) noexcept;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();  // abort() unless committed

  // Appends (handles partial writes/EINTR). ENOSPC/EDQUOT -> no_space.
  Status write(const char* data, size_t size);
  Status write(std::string_view data) { return write(data.data(), data.size()); }

  // Page-cache bypass for large sequential writes (uploads): switches the temp
  // file to O_DIRECT when its filesystem supports it (tmpfs does not). While
  // on, writes whose buffer address and size are multiples of kDirectIoAlign
  // go straight to the device; the first write that is not aligned turns
  // O_DIRECT off for good, so the unaligned tail lands through the page cache.
  // Returns whether O_DIRECT is on.
  static constexpr size_t kDirectIoAlign = 4096;
  bool enable_direct_io();
  bool direct_io() const { return direct_; }

  // commit() = flush() + publish(). The split lets a multi-file request flush
  // every file first (where ENOSPC and permission errors appear) and only then
  // publish them all, so a failure leaves every target untouched.
  Status commit();
  // fsync, chown/chmod, close the temp file (frees the descriptor).
  Status flush();
  // rename over the target, fsync the directory (best effort).
  Status publish();

  // Extended attributes `prefix + key` on the temp file, so the file is
  // published with them (before flush(), which closes it).
  Status write_xattrs(std::string_view prefix, const std::map<std::string, std::string>& values);

  // Unlinks the temp file; target untouched. Idempotent.
  void abort();

  const std::string& target_path() const { return target_path_; }
  const std::string& temp_path() const { return temp_path_; }
  uint64_t bytes_written() const { return bytes_written_; }
  bool committed() const { return published_; }

 private:
  AtomicFile() = default;

  int fd_ = -1;
  std::string target_path_;  // the path that will be replaced (symlinks resolved)
  std::string temp_path_;
  ResolvedPermissions final_permissions_;
  bool preserve_owner_best_effort_ = false;
  uint64_t bytes_written_ = 0;
  bool flushed_ = false;
  bool published_ = false;
  bool aborted_ = false;
  bool direct_ = false;
  void disable_direct_io();
};

// mkdir -p with `mode` (subject to umask) for each created level.
// A non-directory in the way -> conflict.
Status make_directory_tree(const std::string& path, mode_t mode = 0777);

// Makes the renames and creations in `dir` durable (best effort: a
// directory that cannot be opened is left as it is).
void fsync_directory(const std::string& dir);

}  // namespace execd::fs
