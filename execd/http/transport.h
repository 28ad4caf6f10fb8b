// execd/http/transport: the byte pipe under a Connection. The real one is a
// non-blocking TCP socket watched by a uv_poll_t (socket.cc); unit tests use
// a fake that records writes and decides how much each call accepts. The
// Connection never touches a descriptor or a libuv handle itself.
#pragma once

#include <errno.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace execd::http {

class TransportEvents {
 public:
  virtual ~TransportEvents() = default;
  virtual void on_transport_data(const char* data, size_t len) = 0;
  // EOF or a read error: the peer is gone.
  virtual void on_transport_eof() = 0;
  // Just before on_transport_eof() when it was a read error (a reset), not
  // an orderly close: for owners to whom the difference matters.
  virtual void on_transport_error(int err) {}
  // The peer can take more (only after want_writable(true)).
  virtual void on_transport_writable() = 0;
  // close() finished; the transport is gone and the owner may be freed.
  virtual void on_transport_closed() = 0;
  // Readable while reading is left to the owner (set_owner_reads(true)):
  // nothing was read; the owner moves the bytes itself (splice_to_pipe).
  virtual void on_transport_readable() {}
};

class Transport {
 public:
  virtual ~Transport() = default;
  // Bytes written (>= 0), or -errno (-EAGAIN when the peer is full).
  virtual ssize_t writev(const struct iovec* iov, int count) = 0;
  // Sends `len` bytes of `fd` from `offset`; same return convention.
  virtual ssize_t sendfile(int fd, uint64_t offset, size_t len) = 0;
  // Zero-copy moves between the socket and a pipe (splice(2)): up to `len`
  // bytes from the pipe to the peer, or from the peer into the pipe (0: EOF).
  // Same return convention; -ENOSYS where there is no socket to splice.
  virtual ssize_t splice_from_pipe(int pipe_fd, size_t len) { return -ENOSYS; }
  virtual ssize_t splice_to_pipe(int pipe_fd, size_t len) { return -ENOSYS; }
  // On: a readable socket is reported with on_transport_readable() and not
  // read (the owner splices); off: the default, bytes come to on_transport_data().
  virtual void set_owner_reads(bool on) {}
  virtual void want_readable(bool on) = 0;
  virtual void want_writable(bool on) = 0;
  // Half-close: no more writes (the read side stays open).
  virtual void shutdown_write() = 0;
  // Asynchronous; ends with on_transport_closed(). No events after this.
  virtual void close() = 0;
};

}  // namespace execd::http
