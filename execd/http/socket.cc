// execd/http/socket: see header.
#include "execd/http/socket.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

namespace execd::http {

namespace {
constexpr size_t kReadBufferSize = 256 * 1024;
char g_read_buffer[kReadBufferSize];
// Reads per wake-up: one fast client cannot starve the others.
constexpr int kReadsPerWake = 4;
}  // namespace

SocketTransport* SocketTransport::open(uv_loop_t* loop, int fd, TransportEvents& events) {
  auto* t = new SocketTransport(events, fd);
  if (uv_poll_init_socket(loop, &t->poll_, fd) != 0) {
    ::close(fd);
    delete t;
    return nullptr;
  }
  t->poll_.data = t;
  return t;
}

ssize_t SocketTransport::writev(const struct iovec* iov, int count) {
  while (true) {
    ssize_t n = ::writev(fd_, iov, count);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    return -errno;
  }
}

ssize_t SocketTransport::sendfile(int fd, uint64_t offset, size_t len) {
  while (true) {
    off_t off = static_cast<off_t>(offset);
    ssize_t n = ::sendfile(fd_, fd, &off, len);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    return -errno;
  }
}

ssize_t SocketTransport::splice_from_pipe(int pipe_fd, size_t len) {
  while (true) {
    ssize_t n = ::splice(pipe_fd, nullptr, fd_, nullptr, len, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    return -errno;
  }
}

ssize_t SocketTransport::splice_to_pipe(int pipe_fd, size_t len) {
  while (true) {
    ssize_t n = ::splice(fd_, nullptr, pipe_fd, nullptr, len, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    return -errno;
  }
}

void SocketTransport::want_readable(bool on) {
  readable_ = on;
  if (on) peer_shut_ = false;
  update();
}

void SocketTransport::want_writable(bool on) {
  writable_ = on;
  update();
}

void SocketTransport::update() {
  if (closing_) return;
  // While its reading is paused (backpressure), a socket is still watched
  // for the peer going away (a reset, a hang-up), or a client that reset
  // would hold its connection, and what it pinned, until reading resumed.
  int want = (readable_ ? UV_READABLE | UV_DISCONNECT : peer_shut_ ? 0 : UV_DISCONNECT) | (writable_ ? UV_WRITABLE : 0);
  if (want == polled_) return;
  polled_ = want;
  if (want == 0) uv_poll_stop(&poll_);
  else uv_poll_start(&poll_, want, [](uv_poll_t* h, int status, int events) {
    static_cast<SocketTransport*>(h->data)->on_poll(status, events);
  });
}

void SocketTransport::on_poll(int status, int events) {
  const bool failed = status < 0;
  if (!readable_ && !closing_ && (failed || (events & UV_DISCONNECT))) {
    // Paused: a reset ends the connection now, without reading what the
    // owner did not want yet; a plain half-close waits for reading to resume.
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0 || failed) {
      polled_ = failed ? 0 : polled_;
      events_.on_transport_error(err ? err : ECONNRESET);
      events_.on_transport_eof();
      return;
    }
    peer_shut_ = true;
    update();
    events &= ~UV_DISCONNECT;
  }
  if (failed) {
    // libuv reports a socket error (a reset, EPOLLERR) once and stops the
    // handle: read what is left, then the error, and never wait for more.
    polled_ = 0;
    events = UV_READABLE;
  }
  if ((events & UV_WRITABLE) && writable_) {
    events_.on_transport_writable();
    if (closing_) return;
  }
  if (!(events & (UV_READABLE | UV_DISCONNECT)) || (!readable_ && !failed)) return;
  if (owner_reads_) {
    // The owner's splice sees the data, the EOF or the error itself.
    events_.on_transport_readable();
    return;
  }
  // (owner_reads_ may turn on from inside on_transport_data: the rest is the owner's.)
  for (int i = 0; (i < kReadsPerWake || failed) && (readable_ || failed) && !closing_ && !owner_reads_; ++i) {
    ssize_t n = ::read(fd_, g_read_buffer, kReadBufferSize);
    if (n > 0) {
      events_.on_transport_data(g_read_buffer, static_cast<size_t>(n));
      if (static_cast<size_t>(n) < kReadBufferSize && !failed) return;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN && !failed) return;
    const int err = n < 0 ? errno : 0;
    readable_ = false;
    update();
    if (err != 0) events_.on_transport_error(err);
    events_.on_transport_eof();
    return;
  }
}

void SocketTransport::shutdown_write() {
  if (!closing_) ::shutdown(fd_, SHUT_WR);
}

void SocketTransport::close() {
  if (closing_) return;
  closing_ = true;
  // (uv_close stops the handle: a uv_poll_stop first was one more epoll_ctl.)
  uv_close(reinterpret_cast<uv_handle_t*>(&poll_), [](uv_handle_t* h) {
    auto* t = static_cast<SocketTransport*>(h->data);
    ::close(t->fd_);
    TransportEvents& events = t->events_;
    delete t;
    events.on_transport_closed();
  });
}

}  // namespace execd::http
