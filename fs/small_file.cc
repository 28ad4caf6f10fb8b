// fs/small_file: see header.
#include "fs/small_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace execd::fs {

namespace {

// To the end of the file: with read(2) from the descriptor's offset, or with
// pread(2) from offset 0 (`from_start`).
std::optional<std::string> read_to_end(int fd, size_t limit, bool from_start) {
  std::string out;
  char buf[8192];
  for (;;) {
    ssize_t n = from_start ? ::pread(fd, buf, sizeof buf, static_cast<off_t>(out.size())) : ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || out.size() + static_cast<size_t>(n) > limit) return std::nullopt;
    if (n == 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace

std::optional<std::string> read_small_file(const std::string& path, size_t limit) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::optional<std::string> out = read_to_end(fd, limit, false);
  ::close(fd);
  return out;
}

std::optional<std::string> reread_small_file(int fd, size_t limit) { return read_to_end(fd, limit, true); }

int write_all(int fd, std::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    done += static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace execd::fs
