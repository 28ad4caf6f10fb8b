// fs/line_range: see header.
#include "fs/line_range.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace execd::fs {

LineRangeReader::~LineRangeReader() { close_fd(); }

LineRangeReader::LineRangeReader(LineRangeReader&& other) noexcept { *this = std::move(other); }

LineRangeReader& LineRangeReader::operator=(LineRangeReader&& other) noexcept {
  if (this != &other) {
    close_fd();
    fd_ = std::exchange(other.fd_, -1);
    block_ = std::move(other.block_);
    pos_ = other.pos_;
    end_ = other.end_;
    offset_ = other.offset_;
    limit_ = other.limit_;
    line_no_ = other.line_no_;
    in_line_ = other.in_line_;
    lines_started_ = other.lines_started_;
    pending_cr_ = other.pending_cr_;
    cr_to_write_ = other.cr_to_write_;
    separator_owed_ = other.separator_owed_;
    eof_ = other.eof_;
    done_ = other.done_;
    bytes_read_ = other.bytes_read_;
  }
  return *this;
}

void LineRangeReader::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void LineRangeReader::reset(int fd, uint64_t offset, uint64_t limit, size_t block_size) {
  close_fd();
  fd_ = fd;
  block_.assign(block_size == 0 ? kDefaultBlockSize : block_size, '\0');
  pos_ = end_ = 0;
  offset_ = offset == 0 ? 1 : offset;
  limit_ = limit;
  line_no_ = 1;
  in_line_ = false;
  lines_started_ = 0;
  pending_cr_ = cr_to_write_ = 0;
  separator_owed_ = false;
  eof_ = false;
  done_ = false;
  bytes_read_ = 0;
}

Status LineRangeReader::open(const std::string& path, uint64_t offset, uint64_t limit, size_t block_size) {
  // O_NONBLOCK: opening a FIFO must not hang a pool thread.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return Error{ErrorKind::not_found, "file not found: " + path};
    return errno_error(err, "open " + path);
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return errno_error(err, "stat " + path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error{ErrorKind::bad_request,
                 (S_ISDIR(st.st_mode) ? "path is a directory: " : "path is not a regular file: ") + path};
  }
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  reset(fd, offset, limit, block_size);
  return Status::success();
}

void LineRangeReader::open_fd(int fd, uint64_t offset, uint64_t limit, size_t block_size) {
  reset(fd, offset, limit, block_size);
}

Result<size_t> LineRangeReader::next_chunk(char* buf, size_t cap) {
  size_t out = 0;
  while (!done_ && out < cap) {
    if (cr_to_write_ > 0) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(cr_to_write_, cap - out));
      std::memset(buf + out, '\r', n);
      out += n;
      cr_to_write_ -= n;
      continue;
    }
    if (separator_owed_) {
      buf[out++] = '\n';
      separator_owed_ = false;
      continue;
    }
    if (pos_ == end_) {
      if (fd_ < 0) {
        done_ = true;
        break;
      }
      ssize_t n;
      do n = ::read(fd_, block_.data(), block_.size());
      while (n < 0 && errno == EINTR);
      if (n < 0) {
        int err = errno;
        done_ = true;
        close_fd();
        if (out > 0) break;  // hand over what we have; the error ends the body
        return errno_error(err, "read");
      }
      if (n == 0) {
        // EOF: a started last line simply ends here (held-back '\r' dropped).
        done_ = true;
        close_fd();
        break;
      }
      pos_ = 0;
      end_ = static_cast<size_t>(n);
      bytes_read_ += static_cast<uint64_t>(n);
      continue;
    }
    const char* base = block_.data();
    const char* newline = static_cast<const char*>(std::memchr(base + pos_, '\n', end_ - pos_));
    size_t seg_end = newline ? static_cast<size_t>(newline - base) : end_;

    if (line_no_ < offset_) {
      // Skipping: nothing of this line is written.
      if (newline) {
        pos_ = seg_end + 1;
        ++line_no_;
        in_line_ = false;
      } else {
        pos_ = end_;
        in_line_ = true;
      }
      continue;
    }
    if (!in_line_) {
      // First byte of a selected line (a line exists once it has a byte).
      in_line_ = true;
      if (lines_started_ > 0) separator_owed_ = true;
      ++lines_started_;
      continue;
    }
    // Content of a selected line: [pos_, seg_end) has no '\n'. Trailing '\r'
    // bytes are held back until a non-'\r' byte follows them in this line.
    size_t last = seg_end;
    while (last > pos_ && base[last - 1] == '\r') --last;
    if (last > pos_) {
      if (pending_cr_ > 0) {
        cr_to_write_ = pending_cr_;
        pending_cr_ = 0;
        continue;
      }
      size_t n = std::min(last - pos_, cap - out);
      std::memcpy(buf + out, base + pos_, n);
      out += n;
      pos_ += n;
      continue;
    }
    pending_cr_ += seg_end - pos_;
    pos_ = seg_end;
    if (newline) {
      // End of a selected line.
      ++pos_;
      pending_cr_ = 0;
      in_line_ = false;
      ++line_no_;
      if (limit_ != 0 && lines_started_ >= limit_) {
        done_ = true;
        close_fd();
      }
    }
  }
  return out;
}

Result<std::string> LineRangeReader::read_all(size_t chunk) {
  std::string body;
  std::vector<char> buf(chunk == 0 ? 1 : chunk);
  for (;;) {
    auto got = next_chunk(buf.data(), buf.size());
    if (!got) return got.error();
    if (got.value() == 0) return body;
    body.append(buf.data(), got.value());
  }
}

}  // namespace execd::fs
