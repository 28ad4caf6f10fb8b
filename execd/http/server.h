// execd/http/server: the listening socket, the set of live connections, the
// safe point and the tick.
//
// * Accepting: each listener (TCP, and AF_VSOCK with --vsock-port) is a
//   non-blocking socket watched by a uv_poll_t; each accepted socket becomes
//   a Connection over a SocketTransport, whichever listener it came from.
// * Limits: at the connection limit, or out of descriptors, a connection is
//   shed to make room (idle or still sending its head; untrusted ones, that
//   never passed the token check, first, then the longest silent); with none
//   to shed, accepting pauses until a connection closes or the next tick,
//   never spinning on a full backlog.
// * The safe point: connections ask for run_deferred() through schedule();
//   a uv_check handle runs them once per loop pass, after I/O callbacks, when
//   no handler or source is on the stack (a uv_idle handle keeps the loop
//   from blocking while work is due). Connections are freed when their
//   transport has closed.
// * The tick: one timer for every connection's deadlines (idle, lingering
//   close, keepalive pings of sources and WebSockets), so a connection owns
//   no timer of its own. It runs every 250 ms (finer for a short idle
//   timeout) while there are connections, and not at all without them.
#pragma once

#include <sys/socket.h>
#include <uv.h>

#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "execd/http/connection.h"

namespace execd::http {

// "1.2.3.4:80", "[::1]:80", "vsock:3:1024": how logs name a client.
std::string peer_name(const sockaddr_storage& addr);

class Server final : public ConnectionHost {
 public:
  using HeadHandler = std::function<void(Exchange&)>;

  Server(uv_loop_t* loop, const ConnectionLimits& limits, HeadHandler on_head);
  ~Server() override;

  // 0 or -errno. Each call adds a listener.
  int listen(const std::string& host, int port);
  int listen_vsock(uint32_t port);
  // The TCP listener's port, -1 without one.
  int bound_port() const;
  void stop_accepting();
  // Stopping: finish current responses but take no new requests.
  void set_draining() { draining_ = true; }
  void close_idle_connections();
  void close_all_connections();
  size_t connection_count() const { return connections_.size(); }
  // Closes the server's own handles (the loop can then end).
  void close_handles();

  // ConnectionHost
  void on_request_head(Exchange& ex) override { on_head_(ex); }
  void schedule(Connection& conn) override;
  void on_connection_closed(Connection& conn) override;
  uint64_t now_ms() override { return uv_now(loop_); }
  bool draining() override { return draining_; }

 private:
  struct Listener {
    Server* server;
    int fd;
    bool tcp;
    uv_poll_t poll;
  };
  int add_listener(int fd, bool tcp);
  void on_acceptable(Listener& l);
  void poll_listeners(bool on);
  Connection* shed_candidate() const;
  bool shed_one(const char* why);
  void pause_accepting();
  void resume_accepting();
  void run_safe_point();
  void on_tick();

  uv_loop_t* loop_;
  ConnectionLimits limits_;
  HeadHandler on_head_;
  std::vector<std::unique_ptr<Listener>> listeners_;
  bool listening_ = false, accept_paused_ = false, draining_ = false, handles_open_ = true;
  uv_check_t check_;
  uv_idle_t idle_;
  uv_timer_t tick_;
  std::unordered_set<Connection*> connections_;
  std::vector<Connection*> due_;
  uint64_t last_accept_warning_ms_ = 0, last_shed_warning_ms_ = 0;
  uint64_t shed_total_ = 0;
  // Connections shed but not yet closed may exceed the limit by this much.
  static constexpr size_t kShedSlack = 64;
  static constexpr uint64_t kMaxTickMs = 250;
  uint64_t tick_ms_ = kMaxTickMs;
};

}  // namespace execd::http
