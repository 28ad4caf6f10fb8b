// fs/atomic_file.cc — temp-file + fsync + rename writer.
#include "fs/atomic_file.h"

#include <time.h>

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>

#include "fs/paths.h"
#include "fs/xattrs.h"

namespace execd::fs {
namespace {

std::string random_suffix() {
  unsigned char bytes[8] = {};
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    got += static_cast<size_t>(n);
  }
  if (got < sizeof bytes) {
    // getrandom unavailable: fall back to something unique enough, O_EXCL
    // guards against collisions anyway.
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    uint64_t mix = static_cast<uint64_t>(now.tv_nsec) ^ (static_cast<uint64_t>(getpid()) << 32) ^
                   reinterpret_cast<uintptr_t>(&now);
    for (unsigned char& b : bytes) {
      b = static_cast<unsigned char>(mix);
      mix = mix * 6364136223846793005ULL + 1442695040888963407ULL;
    }
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

}  // namespace

void fsync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
}

Status make_directory_tree(const std::string& path, mode_t mode) {
  std::string clean = clean_path(path);
  struct stat st {};
  if (stat(clean.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Status::success();
    return Error{ErrorKind::conflict, "path exists and is not a directory: " + clean};
  }
  // Create each missing level from the top.
  size_t pos = clean.front() == '/' ? 1 : 0;
  while (pos <= clean.size()) {
    size_t slash = clean.find('/', pos);
    if (slash == std::string::npos) slash = clean.size();
    std::string prefix = clean.substr(0, slash);
    pos = slash + 1;
    if (prefix.empty() || prefix == "." || prefix == "..") continue;
    if (mkdir(prefix.c_str(), mode) == 0) continue;
    int err = errno;
    if (err == EEXIST) {
      if (stat(prefix.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
      return Error{ErrorKind::conflict, "path exists and is not a directory: " + prefix};
    }
    return errno_error(err, "mkdir " + prefix);
  }
  return Status::success();
}

Result<AtomicFile> AtomicFile::open(const std::string& target_path, const PermissionSpec& spec) {
  auto resolved = resolve_permissions(spec);
  if (!resolved) return resolved.error();
  if (target_path.empty() || target_path.find('\0') != std::string::npos) {
    return Error{ErrorKind::bad_request, "invalid target path"};
  }

  AtomicFile file;
  file.target_path_ = clean_path(target_path);
  file.final_permissions_ = resolved.value();

  struct stat st {};
  if (lstat(file.target_path_.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    char real[PATH_MAX];
    if (realpath(file.target_path_.c_str(), real) != nullptr) {
      file.target_path_ = real;
    }  // dangling: the link itself is replaced
  }

  std::string directory = parent_path(file.target_path_);
  if (auto made = make_directory_tree(directory); !made) return made.error();

  mode_t create_mode = 0777;  // new file, no mode requested: umask decides, as in Go
  if (stat(file.target_path_.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return Error{ErrorKind::conflict, "target is a directory: " + file.target_path_};
    }
    if (!file.final_permissions_.mode) file.final_permissions_.mode = st.st_mode & 07777;
    if (!file.final_permissions_.changes_owner() && (st.st_uid != geteuid() || st.st_gid != getegid())) {
      file.final_permissions_.uid = st.st_uid;
      file.final_permissions_.gid = st.st_gid;
      file.preserve_owner_best_effort_ = true;
    }
    create_mode = 0600;
  } else if (file.final_permissions_.mode) {
    // Keep the content private until the requested mode is applied.
    create_mode = 0600;
  }

  std::string base = base_name(file.target_path_);
  if (base.size() > 200) base.resize(200);  // keep the temp name under NAME_MAX
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::string candidate = join_path(directory, "." + base + ".execd-" + random_suffix() + ".tmp");
    int fd = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, create_mode);
    if (fd >= 0) {
      file.fd_ = fd;
      file.temp_path_ = std::move(candidate);
      return file;
    }
    if (errno != EEXIST) return errno_error(errno, "create temp file in " + directory);
  }
  return Error{ErrorKind::internal, "could not create a unique temp file in " + directory};
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept { *this = std::move(other); }

AtomicFile& AtomicFile::operator=(AtomicFile&& other) noexcept {
  if (this != &other) {
    abort();
    fd_ = other.fd_;
    target_path_ = std::move(other.target_path_);
    temp_path_ = std::move(other.temp_path_);
    final_permissions_ = other.final_permissions_;
    preserve_owner_best_effort_ = other.preserve_owner_best_effort_;
    bytes_written_ = other.bytes_written_;
    flushed_ = other.flushed_;
    published_ = other.published_;
    aborted_ = other.aborted_;
    direct_ = other.direct_;
    other.fd_ = -1;
    other.temp_path_.clear();
    other.aborted_ = true;
  }
  return *this;
}

AtomicFile::~AtomicFile() { abort(); }

bool AtomicFile::enable_direct_io() {
  if (fd_ < 0 || bytes_written_ % kDirectIoAlign != 0) return false;
  int flags = fcntl(fd_, F_GETFL);
  if (flags < 0 || fcntl(fd_, F_SETFL, flags | O_DIRECT) != 0) return false;
  direct_ = true;
  return true;
}

void AtomicFile::disable_direct_io() {
  direct_ = false;
  int flags = fcntl(fd_, F_GETFL);
  if (flags >= 0) fcntl(fd_, F_SETFL, flags & ~O_DIRECT);
}

Status AtomicFile::write(const char* data, size_t size) {
  if (fd_ < 0) return Error{ErrorKind::internal, "write to a closed temp file for " + target_path_};
  while (size > 0) {
    if (direct_ && (reinterpret_cast<uintptr_t>(data) % kDirectIoAlign != 0 || size % kDirectIoAlign != 0)) {
      disable_direct_io();
    }
    ssize_t n = ::write(fd_, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EINVAL && direct_) {  // the device wants a larger alignment
        disable_direct_io();
        continue;
      }
      return errno_error(errno, "write " + target_path_);
    }
    data += n;
    size -= static_cast<size_t>(n);
    bytes_written_ += static_cast<uint64_t>(n);
  }
  return Status::success();
}

Status AtomicFile::write_xattrs(std::string_view prefix, const std::map<std::string, std::string>& values) {
  if (fd_ < 0) return Error{ErrorKind::internal, "temp file for " + target_path_ + " is not open"};
  return fs::write_xattrs(fd_, target_path_, prefix, values);
}

Status AtomicFile::flush() {
  if (flushed_) return Status::success();
  if (fd_ < 0) return Error{ErrorKind::internal, "temp file for " + target_path_ + " is not open"};
  if (fsync(fd_) != 0) return errno_error(errno, "fsync " + target_path_);
  ResolvedPermissions permissions = final_permissions_;
  if (preserve_owner_best_effort_) {
    // Keeping a foreign owner needs privileges execd may not have; the
    // content change matters more than the owner.
    if (fchown(fd_, *permissions.uid, *permissions.gid) != 0) { /* best effort */ }
    permissions.uid.reset();
    permissions.gid.reset();
  }
  if (auto applied = apply_permissions_fd(fd_, target_path_, permissions); !applied) return applied;
  int fd = fd_;
  fd_ = -1;
  if (close(fd) != 0 && errno != EINTR) return errno_error(errno, "close " + target_path_);
  flushed_ = true;
  return Status::success();
}

Status AtomicFile::publish() {
  if (published_) return Status::success();
  if (!flushed_) {
    if (auto flushed = flush(); !flushed) return flushed;
  }
  if (rename(temp_path_.c_str(), target_path_.c_str()) != 0) {
    return errno_error(errno, "rename " + temp_path_ + " to " + target_path_);
  }
  published_ = true;
  fsync_directory(parent_path(target_path_));
  return Status::success();
}

Status AtomicFile::commit() {
  if (auto flushed = flush(); !flushed) return flushed;
  return publish();
}

void AtomicFile::abort() {
  if (published_ || aborted_) return;
  aborted_ = true;
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
  }
  if (!temp_path_.empty()) unlink(temp_path_.c_str());
}

}  // namespace execd::fs
