// pty/fd_writer: see header.
#include "pty/fd_writer.h"

#include <errno.h>
#include <unistd.h>

namespace execd::pty {

FdWriter* FdWriter::open(uv_loop_t* loop, int fd, std::function<void()> on_drained,
                         std::function<void(int)> on_error) {
  auto* w = new FdWriter();
  w->fd_ = fd;
  w->on_drained_ = std::move(on_drained);
  w->on_error_ = std::move(on_error);
  uv_poll_init(loop, &w->poll_, fd);
  w->poll_.data = w;
  return w;
}

void FdWriter::write(const char* data, size_t len) {
  if (closing_ || failed_ || len == 0) return;
  if (head_ > 0 && head_ == queue_.size()) {
    queue_.clear();
    head_ = 0;
  }
  queue_.append(data, len);
  if (!polling_) flush();
}

void FdWriter::flush() {
  while (head_ < queue_.size()) {
    ssize_t n = ::write(fd_, queue_.data() + head_, queue_.size() - head_);
    if (n > 0) {
      head_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      if (!polling_) {
        uv_poll_start(&poll_, UV_WRITABLE, on_poll);
        polling_ = true;
      }
      // Keep the buffer from growing with consumed bytes at its front.
      if (head_ > (1u << 16) && head_ * 2 > queue_.size()) {
        queue_.erase(0, head_);
        head_ = 0;
      }
      return;
    }
    failed_ = true;
    int err = n < 0 ? errno : EIO;
    queue_.clear();
    head_ = 0;
    if (polling_) {
      uv_poll_stop(&poll_);
      polling_ = false;
    }
    if (on_error_) on_error_(err);
    return;
  }
  queue_.clear();
  head_ = 0;
  if (polling_) {
    uv_poll_stop(&poll_);
    polling_ = false;
  }
  if (on_drained_) on_drained_();
}

void FdWriter::on_poll(uv_poll_t* h, int status, int) {
  auto* w = static_cast<FdWriter*>(h->data);
  if (w->closing_) return;
  w->flush();
}

void FdWriter::close() {
  if (closing_) return;
  closing_ = true;
  on_drained_ = nullptr;
  on_error_ = nullptr;
  if (polling_) uv_poll_stop(&poll_);
  uv_close(reinterpret_cast<uv_handle_t*>(&poll_), [](uv_handle_t* h) {
    auto* w = static_cast<FdWriter*>(h->data);
    ::close(w->fd_);
    delete w;
  });
}

}  // namespace execd::pty
