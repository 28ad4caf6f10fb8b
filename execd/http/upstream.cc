// execd/http/upstream: see header.
#include "execd/http/upstream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "execd/http/socket.h"

namespace execd::http {

// ---------------------------------------------------------------------------
// UpstreamConnection

UpstreamConnection* UpstreamConnection::connect(uv_loop_t* loop, int port, UpstreamEvents& owner, int& err) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    err = -errno;
    return nullptr;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int rc;
  do rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  while (rc != 0 && errno == EINTR);
  if (rc != 0 && errno != EINPROGRESS) {
    err = -errno;
    ::close(fd);
    return nullptr;
  }
  auto* up = new UpstreamConnection(owner, port);
  up->fd_ = fd;
  up->transport_ = SocketTransport::open(loop, fd, *up);  // closes fd on failure
  if (!up->transport_) {
    err = -ENOMEM;
    delete up;
    return nullptr;
  }
  // Writable once the connect finished (either way).
  up->write_blocked_ = true;
  up->transport_->want_writable(true);
  return up;
}

bool UpstreamConnection::write(std::string&& data) {
  if (closed_ || broken_) return false;
  queue_.append(std::move(data));
  if (!write_blocked_) flush();
  if (queue_.above_high_water()) {
    owes_drained_ = true;
    return false;
  }
  return true;
}

bool UpstreamConnection::write(std::string_view data) {
  std::string copy = queue_.take_buffer();
  copy.assign(data);
  return write(std::move(copy));
}

void UpstreamConnection::flush() {
  while (!queue_.empty()) {
    struct iovec iov[WriteQueue::kMaxIov];
    int count = queue_.gather(iov, WriteQueue::kMaxIov);
    ssize_t n = transport_->writev(iov, count);
    if (n > 0) {
      queue_.consume(static_cast<size_t>(n));
      continue;
    }
    if (n == -EAGAIN || n == -EWOULDBLOCK) {
      write_blocked_ = true;
      transport_->want_writable(true);
      return;
    }
    // The service is gone (EPIPE, ECONNRESET). Reading tells the owner: a
    // reset socket reports its error or EOF on the next read.
    queue_.clear();
    broken_ = true;
    update_reading();
    return;
  }
  if (shutdown_pending_) {
    shutdown_pending_ = false;
    transport_->shutdown_write();
  }
}

void UpstreamConnection::on_transport_writable() {
  if (closed_) return;
  write_blocked_ = false;
  transport_->want_writable(false);
  if (!connected_) {
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) {
      eof_ = true;
      owner_->on_upstream_eof(*this);
      return;
    }
    connected_ = true;
    update_reading();
  }
  flush();
  if (closed_) return;
  if (owes_drained_ && queue_.below_low_water()) {
    owes_drained_ = false;
    owner_->on_upstream_drained(*this);
  }
}

void UpstreamConnection::want_data(bool on) {
  want_data_ = on;
  update_reading();
}

void UpstreamConnection::spliced_reads(bool on) {
  if (transport_) transport_->set_owner_reads(on);
}

ssize_t UpstreamConnection::splice_to_pipe(int pipe_fd, size_t len) {
  if (closed_ || !transport_) return -EPIPE;
  ssize_t n = transport_->splice_to_pipe(pipe_fd, len);
  if (n == 0) {
    eof_ = true;
    update_reading();
  }
  return n;
}

void UpstreamConnection::on_transport_readable() {
  if (closed_) return;
  owner_->on_upstream_readable(*this);
}

void UpstreamConnection::update_reading() {
  bool want = !closed_ && connected_ && !eof_ && (want_data_ || broken_);
  if (want == reading_) return;
  reading_ = want;
  transport_->want_readable(want);
}

void UpstreamConnection::shutdown_write_when_flushed() {
  if (closed_ || broken_) return;
  shutdown_pending_ = true;
  if (connected_ && !write_blocked_ && queue_.empty()) flush();
}

void UpstreamConnection::on_transport_data(const char* data, size_t len) {
  if (closed_) return;
  owner_->on_upstream_data(*this, data, len);
}

void UpstreamConnection::on_transport_eof() {
  if (closed_) return;
  eof_ = true;
  reading_ = false;
  owner_->on_upstream_eof(*this);
}

void UpstreamConnection::close() {
  if (closed_) return;
  closed_ = true;
  queue_.clear();
  transport_->close();  // on_transport_closed() frees this
}

void UpstreamConnection::on_transport_closed() { delete this; }

// ---------------------------------------------------------------------------
// SplicePipes

SplicePipes::Pipe SplicePipes::take() {
  if (!spare_.empty()) {
    Pipe p = spare_.back();
    spare_.pop_back();
    return p;
  }
  int fds[2];
  if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) return {};
  fcntl(fds[1], F_SETPIPE_SZ, kPipeSize);  // best effort
  int size = fcntl(fds[1], F_GETPIPE_SZ);
  Pipe p;
  p.read_fd = fds[0];
  p.write_fd = fds[1];
  p.capacity = size > 0 ? static_cast<size_t>(size) : 65536;
  return p;
}

void SplicePipes::give(Pipe pipe, bool empty) {
  if (!pipe.valid()) return;
  if (empty && spare_.size() < kKeep) {
    spare_.push_back(pipe);
    return;
  }
  ::close(pipe.read_fd);
  ::close(pipe.write_fd);
}

void SplicePipes::close() {
  for (const Pipe& p : spare_) {
    ::close(p.read_fd);
    ::close(p.write_fd);
  }
  spare_.clear();
}

// ---------------------------------------------------------------------------
// UpstreamPool

namespace {
constexpr uint64_t kSweepMs = 5000;
}

UpstreamPool::UpstreamPool(uv_loop_t* loop) : loop_(loop), timer_(new uv_timer_t) {
  uv_timer_init(loop, timer_);
  timer_->data = this;
  uv_unref(reinterpret_cast<uv_handle_t*>(timer_));
}

UpstreamPool::~UpstreamPool() { close(); }

UpstreamConnection* UpstreamPool::take(int port) {
  if (closed_) return nullptr;
  auto it = idle_.find(port);
  if (it == idle_.end()) return nullptr;
  auto& list = it->second;
  const uint64_t now = uv_now(loop_);
  while (!list.empty()) {
    Idle entry = list.back();
    list.pop_back();
    --total_;
    if (now - entry.since_ms >= kIdleTimeoutMs) {
      entry.up->close();
      continue;
    }
    if (list.empty()) idle_.erase(it);
    entry.up->reused = true;
    return entry.up;
  }
  idle_.erase(it);
  return nullptr;
}

void UpstreamPool::put(UpstreamConnection* up) {
  if (closed_) {
    up->close();
    return;
  }
  auto& list = idle_[up->port()];
  if (list.size() >= kMaxIdlePerPort || total_ >= kMaxIdle) {
    up->close();
    if (list.empty()) idle_.erase(up->port());
    return;
  }
  up->set_owner(*this);
  up->want_data(true);  // to notice the service closing it
  list.push_back({up, uv_now(loop_)});
  ++total_;
  if (!uv_is_active(reinterpret_cast<uv_handle_t*>(timer_)))
    uv_timer_start(timer_, [](uv_timer_t* t) { static_cast<UpstreamPool*>(t->data)->sweep(); }, kSweepMs, kSweepMs);
}

void UpstreamPool::drop(UpstreamConnection& up) {
  auto it = idle_.find(up.port());
  if (it != idle_.end()) {
    auto& list = it->second;
    auto pos = std::find_if(list.begin(), list.end(), [&](const Idle& e) { return e.up == &up; });
    if (pos != list.end()) {
      list.erase(pos);
      --total_;
    }
    if (list.empty()) idle_.erase(it);
  }
  up.close();
}

void UpstreamPool::on_upstream_data(UpstreamConnection& up, const char*, size_t) { drop(up); }

void UpstreamPool::on_upstream_eof(UpstreamConnection& up) { drop(up); }

void UpstreamPool::sweep() {
  const uint64_t now = uv_now(loop_);
  for (auto it = idle_.begin(); it != idle_.end();) {
    auto& list = it->second;
    while (!list.empty() && now - list.front().since_ms >= kIdleTimeoutMs) {
      list.front().up->close();
      list.pop_front();
      --total_;
    }
    it = list.empty() ? idle_.erase(it) : std::next(it);
  }
  if (total_ == 0) uv_timer_stop(timer_);
}

void UpstreamPool::close() {
  if (closed_) return;
  closed_ = true;
  for (auto& [port, list] : idle_)
    for (auto& e : list) e.up->close();
  idle_.clear();
  total_ = 0;
  uv_timer_stop(timer_);
  uv_close(reinterpret_cast<uv_handle_t*>(timer_), [](uv_handle_t* h) { delete reinterpret_cast<uv_timer_t*>(h); });
}

}  // namespace execd::http
