// pty/pump: see header.
#include "pty/pump.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace execd::pty {
namespace {
// Large enough that a few reads drain a full 1 MiB stdout pipe (spawn.cc);
// shared by all pumps since the loop is single-threaded and data is consumed
// synchronously.
constexpr size_t kReadSize = 256 * 1024;
uint8_t g_read_buffer[kReadSize];
}  // namespace

OutputPump* OutputPump::open(uv_loop_t* loop, int fd, DataFn on_data, EofFn on_eof) {
  auto* p = new OutputPump();
  p->fd_ = fd;
  struct stat st;
  p->short_read_drains_ = fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
  p->on_data_ = std::move(on_data);
  p->on_eof_ = std::move(on_eof);
  uv_poll_init(loop, &p->poll_, fd);
  p->poll_.data = p;
  p->resume();
  return p;
}

void OutputPump::pause() {
  paused_ = true;
  if (polling_) {
    uv_poll_stop(&poll_);
    polling_ = false;
  }
}

void OutputPump::resume() {
  paused_ = false;
  if (!polling_ && !eof_ && !closing_) {
    uv_poll_start(&poll_, UV_READABLE | UV_DISCONNECT, on_poll);
    polling_ = true;
  }
}

void OutputPump::on_poll(uv_poll_t* h, int status, int events) {
  auto* self = static_cast<OutputPump*>(h->data);
  // Bounded number of reads per wake-up keeps one busy command from starving
  // the loop's other work.
  self->read_some(status < 0 ? 1 : 16);
}

size_t OutputPump::read_some(int max_reads) {
  size_t delivered = 0;
  for (int i = 0; i < max_reads && !paused_ && !eof_ && !closing_; ++i) {
    std::span<uint8_t> room = room_ ? room_() : std::span<uint8_t>{};
    if (room.empty()) room = {g_read_buffer, kReadSize};
    room = room.first(std::min(room.size(), kReadSize));
    ssize_t n = ::read(fd_, room.data(), room.size());
    if (n > 0) {
      bytes_ += static_cast<uint64_t>(n);
      delivered += static_cast<size_t>(n);
      on_data_(room.data(), static_cast<size_t>(n));
      if (short_read_drains_ && static_cast<size_t>(n) < room.size()) break;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    // 0 = EOF; EIO = PTY slave closed by every holder.
    finish();
    break;
  }
  return delivered;
}

size_t OutputPump::drain_now() {
  size_t total = 0;
  while (!paused_ && !eof_ && !closing_) {
    size_t n = read_some(1);
    if (n == 0) break;
    total += n;
  }
  return total;
}

void OutputPump::finish() {
  eof_ = true;
  if (polling_) {
    uv_poll_stop(&poll_);
    polling_ = false;
  }
  if (on_eof_) on_eof_();
}

void OutputPump::close() {
  if (closing_) return;
  closing_ = true;  // callbacks may be running: they are destroyed with the pump
  polling_ = false;  // uv_close stops the handle
  uv_close(reinterpret_cast<uv_handle_t*>(&poll_), [](uv_handle_t* h) {
    auto* self = static_cast<OutputPump*>(h->data);
    ::close(self->fd_);
    delete self;
  });
}

}  // namespace execd::pty
