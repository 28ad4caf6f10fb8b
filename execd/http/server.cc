// execd/http/server: see header.
#include "execd/http/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>
#include <linux/vm_sockets.h>

#include <algorithm>
#include <charconv>

#include "execd/http/socket.h"

namespace execd::http {

namespace {
constexpr int kAcceptsPerWake = 64;
}  // namespace

std::string peer_name(const sockaddr_storage& addr) {
  char ip[INET6_ADDRSTRLEN] = "";
  if (addr.ss_family == AF_VSOCK) {
    auto* a = reinterpret_cast<const sockaddr_vm*>(&addr);
    return "vsock:" + std::to_string(a->svm_cid) + ":" + std::to_string(a->svm_port);
  }
  if (addr.ss_family == AF_INET) {
    // With to_chars: inet_ntop's sprintf, to_string and the concatenations
    // were ~1% of a command's CPU on every connection.
    auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    const auto* b = reinterpret_cast<const unsigned char*>(&a->sin_addr);
    char text[sizeof "255.255.255.255:65535"];
    char* const end = text + sizeof text;
    char* p = text;
    for (int i = 0; i < 4; ++i) {
      p = std::to_chars(p, end, b[i]).ptr;
      *p++ = i < 3 ? '.' : ':';
    }
    p = std::to_chars(p, end, ntohs(a->sin_port)).ptr;
    return std::string(text, static_cast<size_t>(p - text));
  }
  auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
  inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
  return std::string("[") + ip + "]:" + std::to_string(ntohs(a->sin6_port));
}

Server::Server(uv_loop_t* loop, const ConnectionLimits& limits, HeadHandler on_head)
    : loop_(loop), limits_(limits), on_head_(std::move(on_head)) {
  uv_check_init(loop, &check_);
  check_.data = this;
  uv_check_start(&check_, [](uv_check_t* h) { static_cast<Server*>(h->data)->run_safe_point(); });
  uv_unref(reinterpret_cast<uv_handle_t*>(&check_));
  uv_idle_init(loop, &idle_);
  idle_.data = this;
  uv_timer_init(loop, &tick_);
  tick_.data = this;
  // Fine enough for 3 s keepalives to land within 250 ms of their time; it
  // runs only while there are connections, so an idle daemon never wakes.
  tick_ms_ = kMaxTickMs;
  if (limits.idle_timeout_ms) tick_ms_ = std::clamp<uint64_t>(limits.idle_timeout_ms / 4, 50, kMaxTickMs);
  uv_unref(reinterpret_cast<uv_handle_t*>(&tick_));
}

Server::~Server() = default;

int Server::listen(const std::string& host, int port) {
  sockaddr_storage addr{};
  int rc = uv_ip4_addr(host.c_str(), port, reinterpret_cast<sockaddr_in*>(&addr));
  if (rc != 0) rc = uv_ip6_addr(host.c_str(), port, reinterpret_cast<sockaddr_in6*>(&addr));
  if (rc != 0) return rc;
  int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  socklen_t len = addr.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd, 4096) != 0) {
    int err = -errno;
    ::close(fd);
    return err;
  }
  return add_listener(fd, true);
}

int Server::listen_vsock(uint32_t port) {
  int fd = ::socket(AF_VSOCK, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  sockaddr_vm addr{};
  addr.svm_family = AF_VSOCK;
  addr.svm_cid = VMADDR_CID_ANY;
  addr.svm_port = port;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 4096) != 0) {
    int err = -errno;
    ::close(fd);
    return err;
  }
  return add_listener(fd, false);
}

int Server::add_listener(int fd, bool tcp) {
  auto l = std::make_unique<Listener>();
  l->server = this;
  l->fd = fd;
  l->tcp = tcp;
  if (int rc = uv_poll_init_socket(loop_, &l->poll, fd); rc != 0) {
    ::close(fd);
    return rc;
  }
  l->poll.data = l.get();
  listeners_.push_back(std::move(l));
  listening_ = true;
  if (!accept_paused_) poll_listeners(true);
  return 0;
}

void Server::poll_listeners(bool on) {
  for (auto& l : listeners_) {
    if (l->fd < 0) continue;
    if (!on) {
      uv_poll_stop(&l->poll);
      continue;
    }
    uv_poll_start(&l->poll, UV_READABLE, [](uv_poll_t* h, int, int) {
      auto* l = static_cast<Listener*>(h->data);
      l->server->on_acceptable(*l);
    });
  }
}

int Server::bound_port() const {
  for (const auto& l : listeners_) {
    if (!l->tcp || l->fd < 0) continue;
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (getsockname(l->fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
    if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  }
  return -1;
}

Connection* Server::shed_candidate() const {
  // Untrusted before trusted (a client that never showed the token is the
  // likelier attacker), then the one silent the longest.
  Connection* best = nullptr;
  for (Connection* c : connections_) {
    if (!c->sheddable()) continue;
    if (!best || (!c->trusted() && best->trusted()) ||
        (c->trusted() == best->trusted() && c->idle_since_ms() < best->idle_since_ms()))
      best = c;
  }
  return best;
}

bool Server::shed_one(const char* why) {
  Connection* victim = shed_candidate();
  if (!victim) return false;
  ++shed_total_;
  uint64_t now = uv_now(loop_);
  if (now - last_shed_warning_ms_ >= 10000) {
    last_shed_warning_ms_ = now;
    spdlog::warn("{}: closing idle and unauthenticated connections first ({} so far)", why, shed_total_);
  }
  victim->close();
  return true;
}

void Server::pause_accepting() {
  if (accept_paused_) return;
  accept_paused_ = true;
  poll_listeners(false);
  // The tick retries; so does every connection that closes.
  uv_timer_start(&tick_, [](uv_timer_t* t) { static_cast<Server*>(t->data)->on_tick(); }, tick_ms_, tick_ms_);
}

void Server::resume_accepting() {
  if (!accept_paused_ || !listening_) return;
  accept_paused_ = false;
  poll_listeners(true);
}

void Server::on_acceptable(Listener& l) {
  for (int i = 0; i < kAcceptsPerWake && listening_; ++i) {
    if (limits_.max_connections && connections_.size() >= limits_.max_connections + kShedSlack) {
      // Victims close at this pass's safe point; until then wait for them.
      pause_accepting();
      return;
    }
    if (limits_.max_connections && connections_.size() >= limits_.max_connections &&
        !shed_one("connection limit reached")) {
      pause_accepting();
      return;
    }
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    int fd = accept4(l.fd, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // Out of descriptors or memory: the pending connection stays in the
      // backlog. Free a descriptor by shedding, and accept again when a
      // connection has closed (or at the next tick) instead of spinning.
      int err = errno;
      uint64_t now = uv_now(loop_);
      if (now - last_accept_warning_ms_ >= 10000) {
        last_accept_warning_ms_ = now;
        spdlog::warn("accept failed: {}; pausing new connections", strerror(err));
      }
      if (err == EMFILE || err == ENFILE) shed_one("out of file descriptors");
      pause_accepting();
      return;
    }
    int one = 1;
    if (l.tcp) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto* conn = new Connection(*this, limits_);
    Transport* transport = SocketTransport::open(loop_, fd, *conn);
    if (!transport) {
      delete conn;
      continue;
    }
    connections_.insert(conn);
    if (connections_.size() == 1 || accept_paused_)
      uv_timer_start(&tick_, [](uv_timer_t* t) { static_cast<Server*>(t->data)->on_tick(); }, tick_ms_, tick_ms_);
    conn->start(transport, peer_name(addr));
  }
}

void Server::stop_accepting() {
  draining_ = true;
  if (!listening_) return;
  listening_ = false;
  for (auto& l : listeners_) {
    uv_poll_stop(&l->poll);
    uv_close(reinterpret_cast<uv_handle_t*>(&l->poll), [](uv_handle_t* h) {
      auto* l = static_cast<Listener*>(h->data);
      ::close(l->fd);
      l->fd = -1;
    });
  }
}

void Server::close_idle_connections() {
  for (Connection* c : connections_)
    if (c->idle()) c->close();
}

void Server::close_all_connections() {
  for (Connection* c : connections_) c->close();
}

void Server::schedule(Connection& conn) {
  due_.push_back(&conn);
  if (handles_open_) uv_idle_start(&idle_, [](uv_idle_t*) {});
}

void Server::run_safe_point() {
  // Work scheduled while this runs waits for the next pass (the idle handle
  // keeps that pass from blocking), so a busy client cannot hold the loop here.
  std::vector<Connection*> now;
  now.swap(due_);
  for (Connection* c : now) c->run_deferred();
  if (due_.empty() && handles_open_) uv_idle_stop(&idle_);
}

void Server::on_connection_closed(Connection& conn) {
  connections_.erase(&conn);
  if (connections_.empty() && !accept_paused_ && handles_open_) uv_timer_stop(&tick_);
  due_.erase(std::remove(due_.begin(), due_.end(), &conn), due_.end());
  delete &conn;
  // A descriptor and a connection slot are free again.
  if (accept_paused_ && handles_open_) resume_accepting();
}

void Server::on_tick() {
  uint64_t now = uv_now(loop_);
  resume_accepting();
  for (Connection* c : connections_) c->tick(now);
}

void Server::close_handles() {
  if (!handles_open_) return;
  handles_open_ = false;
  stop_accepting();
  for (uv_handle_t* h : {reinterpret_cast<uv_handle_t*>(&check_), reinterpret_cast<uv_handle_t*>(&idle_),
                         reinterpret_cast<uv_handle_t*>(&tick_)})
    uv_close(h, nullptr);
}

}  // namespace execd::http
