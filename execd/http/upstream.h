// execd/http/upstream: client connections from execd to services on
// 127.0.0.1 (the /proxy/{port} route), and the per-port keep-alive pool.
//
// Ownership: an UpstreamConnection has exactly one owner at a time: the
// proxy exchange or tunnel using it, or the pool while it is idle. Events go
// to the owner's UpstreamEvents; handing it over means set_owner(). close()
// is the end of ownership: no event arrives after it, and the object frees
// itself once its socket is closed (a libuv close callback, never inside a
// caller's stack). Loop thread only.
//
// Writes go through a WriteQueue with the same water marks as a client
// Connection: write() answers false above the high-water mark and the owner
// hears on_upstream_drained() below the low-water mark.
#pragma once

#include <uv.h>

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "execd/http/transport.h"
#include "execd/http/write_queue.h"

namespace execd::http {

class UpstreamConnection;

class UpstreamEvents {
 public:
  virtual ~UpstreamEvents() = default;
  virtual void on_upstream_data(UpstreamConnection& up, const char* data, size_t len) = 0;
  // The service closed (or reset, or refused the connection, or a write
  // failed): nothing more will be read. connected() tells a refusal apart.
  virtual void on_upstream_eof(UpstreamConnection& up) = 0;
  // The write queue fell below its low-water mark after write() said false.
  virtual void on_upstream_drained(UpstreamConnection& up) {}
  // Readable while the owner splices (spliced_reads(true)); nothing was read.
  virtual void on_upstream_readable(UpstreamConnection& up) {}
};

class UpstreamConnection final : public TransportEvents {
 public:
  // Starts a non-blocking connect to 127.0.0.1:port. nullptr (and `err`, a
  // negative errno) when it failed at once.
  static UpstreamConnection* connect(uv_loop_t* loop, int port, UpstreamEvents& owner, int& err);

  void set_owner(UpstreamEvents& owner) { owner_ = &owner; }
  int port() const { return port_; }
  bool connected() const { return connected_; }
  // Taken from the pool (a service may have closed it meanwhile).
  bool reused = false;

  // False: above the high-water mark (wait for on_upstream_drained) or broken.
  bool write(std::string&& data);
  bool write(std::string_view data);
  bool idle_writes() const { return queue_.empty(); }
  // A write failed: the service is gone (its EOF or reset follows).
  bool broken() const { return broken_; }
  // The service reset the connection (a read failed), rather than closing it.
  bool reset() const { return reset_; }
  // Reading on or off (backpressure from the client side).
  void want_data(bool on);
  // On: the owner moves the bytes itself with splice_to_pipe() when told
  // on_upstream_readable(); off (the default): on_upstream_data().
  void spliced_reads(bool on);
  // Up to `len` bytes into `pipe_fd`; 0 at EOF, -errno (-EAGAIN: nothing yet).
  ssize_t splice_to_pipe(int pipe_fd, size_t len);
  // Shuts the write side once everything queued went out (a half-close).
  void shutdown_write_when_flushed();
  void close();

  // TransportEvents
  void on_transport_data(const char* data, size_t len) override;
  void on_transport_eof() override;
  void on_transport_writable() override;
  void on_transport_closed() override;
  void on_transport_readable() override;
  void on_transport_error(int) override { reset_ = true; }

 private:
  UpstreamConnection(UpstreamEvents& owner, int port) : owner_(&owner), port_(port) {}
  ~UpstreamConnection() override = default;
  void flush();
  void update_reading();
  void fail();

  UpstreamEvents* owner_;
  Transport* transport_ = nullptr;
  WriteQueue queue_;
  int fd_ = -1;
  int port_;
  bool connected_ = false, closed_ = false, eof_ = false, want_data_ = true, reading_ = false;
  bool write_blocked_ = false, owes_drained_ = false, shutdown_pending_ = false, broken_ = false, reset_ = false;
};

// Pipes for splice(2) (service socket → pipe → client socket), kept for
// reuse while empty. A pipe is owned by one proxied response at a time;
// one given back with bytes still in it is closed instead.
class SplicePipes {
 public:
  static constexpr size_t kKeep = 8;
  // Pipe capacity asked for: fewer, larger moves per wake-up. The kernel may
  // refuse (pipe-user-pages-soft); the default then serves.
  static constexpr int kPipeSize = 1 << 20;
  struct Pipe {
    int read_fd = -1, write_fd = -1;
    size_t capacity = 0;
    bool valid() const { return read_fd >= 0; }
  };

  ~SplicePipes() { close(); }
  // An empty pipe, or an invalid one when none can be made (no descriptors).
  Pipe take();
  // Back from its user; `empty`: nothing left inside.
  void give(Pipe pipe, bool empty);
  void close();

 private:
  std::vector<Pipe> spare_;
};

// Idle keep-alive connections per port: bounded per port and in total, each
// closed after kIdleTimeoutMs or as soon as the service closes it.
class UpstreamPool final : public UpstreamEvents {
 public:
  static constexpr size_t kMaxIdlePerPort = 32;
  static constexpr size_t kMaxIdle = 256;
  static constexpr uint64_t kIdleTimeoutMs = 30000;

  explicit UpstreamPool(uv_loop_t* loop);
  ~UpstreamPool() override;
  // An idle connection to `port` (the caller owns it), or nullptr.
  UpstreamConnection* take(int port);
  // Takes ownership of a connection that finished a response cleanly.
  void put(UpstreamConnection* up);
  size_t idle_count() const { return total_; }
  // Closes every idle connection and the sweep timer (daemon shutdown).
  void close();

  // UpstreamEvents: an idle connection spoke or closed: it is dropped.
  void on_upstream_data(UpstreamConnection& up, const char* data, size_t len) override;
  void on_upstream_eof(UpstreamConnection& up) override;

 private:
  struct Idle {
    UpstreamConnection* up;
    uint64_t since_ms;
  };
  void drop(UpstreamConnection& up);
  void sweep();

  uv_loop_t* loop_;
  uv_timer_t* timer_;  // freed by its close callback
  std::unordered_map<int, std::deque<Idle>> idle_;
  size_t total_ = 0;
  bool closed_ = false;
};

}  // namespace execd::http
