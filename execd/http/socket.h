// execd/http/socket: the Transport of a real connection: a non-blocking TCP
// socket watched by one uv_poll_t. Reads go through one shared buffer (the
// loop is single-threaded and every read is consumed before the next), so an
// idle connection costs no buffer at all. Owns the descriptor; frees itself
// after close(), once the poll handle is closed.
#pragma once

#include <uv.h>

#include "execd/http/transport.h"

namespace execd::http {

class SocketTransport final : public Transport {
 public:
  static SocketTransport* open(uv_loop_t* loop, int fd, TransportEvents& events);

  ssize_t writev(const struct iovec* iov, int count) override;
  ssize_t sendfile(int fd, uint64_t offset, size_t len) override;
  ssize_t splice_from_pipe(int pipe_fd, size_t len) override;
  ssize_t splice_to_pipe(int pipe_fd, size_t len) override;
  void set_owner_reads(bool on) override { owner_reads_ = on; }
  void want_readable(bool on) override;
  void want_writable(bool on) override;
  void shutdown_write() override;
  void close() override;

 private:
  SocketTransport(TransportEvents& events, int fd) : events_(events), fd_(fd) {}
  ~SocketTransport() override = default;
  void update();
  void on_poll(int status, int events);

  TransportEvents& events_;
  int fd_;
  uv_poll_t poll_;
  bool readable_ = false, writable_ = false, closing_ = false, owner_reads_ = false;
  // Reading is paused and the peer half-closed: nothing to watch for until
  // reading resumes (EPOLLRDHUP would fire on every loop pass).
  bool peer_shut_ = false;
  int polled_ = 0;  // events currently asked of libuv
};

}  // namespace execd::http
