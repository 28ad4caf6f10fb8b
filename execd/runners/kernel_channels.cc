// execd/runners/kernel_channels: see header.
#include "execd/runners/kernel_channels.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <variant>
#include <vector>

namespace execd::runners {

namespace jp = protocol::jupyter;
namespace zmtp = protocol::zmtp;

namespace {

// Connect attempts while a kernel starts (it binds its sockets once its
// interpreter is up), then less often.
constexpr uint64_t kRetryStartMs = 25;
constexpr uint64_t kRetryLaterMs = 100;
constexpr uint64_t kStartWindowMs = 5000;

}  // namespace

const char* channel_name(KernelChannel ch) {
  switch (ch) {
    case KernelChannel::shell: return "shell";
    case KernelChannel::iopub: return "iopub";
    case KernelChannel::control: return "control";
    case KernelChannel::stdin_: return "stdin";
    case KernelChannel::hb: return "heartbeat";
  }
  return "?";
}

KernelChannels::KernelChannels(uv_loop_t* loop, KernelChannelHandler& handler, const pty::KernelConnection& conn,
                               uint64_t max_message)
    : loop_(loop), handler_(&handler), key_(conn.key), conn_(conn), max_message_(max_message) {}

KernelChannels* KernelChannels::connect(uv_loop_t* loop, const pty::KernelConnection& conn,
                                        KernelChannelHandler& handler, uint64_t max_message, std::string& error) {
  if (conn.transport == "ipc") {
    if (conn.ip.size() + 8 >= sizeof(sockaddr_un{}.sun_path)) {
      error = "the kernel's socket path is too long: " + conn.ip;
      return nullptr;
    }
  } else if (conn.transport == "tcp") {
    in_addr a;
    if (inet_pton(AF_INET, conn.ip.c_str(), &a) != 1) {
      error = "not an IPv4 address: " + conn.ip;
      return nullptr;
    }
  } else {
    error = "unknown kernel transport: " + conn.transport;
    return nullptr;
  }
  auto* k = new KernelChannels(loop, handler, conn, max_message);
  uv_timer_init(loop, &k->retry_timer_);
  uv_idle_init(loop, &k->deferred_);
  k->retry_timer_.data = k;
  k->deferred_.data = k;
  k->open_handles_ = 2;
  k->started_ms_ = uv_now(loop);
  const zmtp::SocketType types[kCount] = {zmtp::SocketType::dealer, zmtp::SocketType::sub, zmtp::SocketType::dealer,
                                           zmtp::SocketType::dealer, zmtp::SocketType::req};
  zmtp::Limits limits;
  limits.max_message = max_message;
  for (int i = 0; i < kCount; ++i) {
    Channel& c = k->channels_[i];
    c.owner = k;
    c.which = static_cast<KernelChannel>(i);
    c.type = types[i];
    c.codec = std::make_unique<zmtp::Connection>(c.type, limits);
    if (c.type == zmtp::SocketType::sub) c.codec->subscribe("");
  }
  for (auto& c : k->channels_) k->attempt(c);
  return k;
}

void KernelChannels::attempt(Channel& c) {
  c.retry_at = 0;
  if (closed_ || c.failed || c.transport) return;
  const int ports[kCount] = {conn_.shell_port, conn_.iopub_port, conn_.control_port, conn_.stdin_port, conn_.hb_port};
  const int port = ports[static_cast<int>(c.which)];
  const bool ipc = conn_.transport == "ipc";
  int fd = ::socket(ipc ? AF_UNIX : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return schedule_retry(c);
  int rc;
  if (ipc) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::string path = conn_.ip + "-" + std::to_string(port);
    memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    do rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    while (rc != 0 && errno == EINTR);
  } else {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, conn_.ip.c_str(), &addr.sin_addr);
    do rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    while (rc != 0 && errno == EINTR);
  }
  if (rc != 0 && errno != EINPROGRESS) {
    // Not bound yet (ENOENT, ECONNREFUSED) or its backlog is full (EAGAIN).
    ::close(fd);
    return schedule_retry(c);
  }
  c.transport = http::SocketTransport::open(loop_, fd, c);  // (closes fd on failure)
  if (!c.transport) return schedule_retry(c);
  ++open_handles_;
  c.fd = fd;
  if (rc == 0) return connected(c);
  c.connecting = true;
  c.transport->want_writable(true);
}

void KernelChannels::connected(Channel& c) {
  c.connecting = false;
  c.connected = true;
  update_reading(c);
  flush(c);
}

void KernelChannels::Channel::on_transport_writable() {
  KernelChannels& k = *owner;
  if (k.closed_ || !transport) return;
  transport->want_writable(false);
  write_blocked = false;
  if (connecting) {
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) return k.disconnect(*this);
    return k.connected(*this);
  }
  k.flush(*this);
}

void KernelChannels::flush(Channel& c) {
  if (!c.connected || c.failed) return;
  std::string& pending = c.codec->output();
  if (!pending.empty()) {
    c.out.append(std::move(pending));
    pending.clear();
  }
  if (c.write_blocked) return;
  while (!c.out.empty()) {
    struct iovec iov[http::WriteQueue::kMaxIov];
    int count = c.out.gather(iov, http::WriteQueue::kMaxIov);
    ssize_t n = c.transport->writev(iov, count);
    if (n > 0) {
      c.out.consume(static_cast<size_t>(n));
      continue;
    }
    if (n == -EAGAIN || n == -EWOULDBLOCK) {
      c.write_blocked = true;
      c.transport->want_writable(true);
      return;
    }
    // The kernel's end is gone. Reconnecting here could free what a caller
    // up the stack still reads, so it waits for the next pass.
    c.out.clear();
    c.broken = true;
    schedule_deferred();
    return;
  }
}

void KernelChannels::Channel::on_transport_data(const char* data, size_t len) {
  KernelChannels& k = *owner;
  if (k.closed_ || failed) return;
  if (!codec->feed(data, len)) return k.fail(*this, codec->error());
  k.take_messages(*this);
  if (k.closed_) return;
  k.flush(*this);  // (PONGs)
  uint64_t budget = kDeliverTurnBytes;
  k.deliver(*this, budget);
  if (!k.closed_) k.update_reading(*this);
}

void KernelChannels::take_messages(Channel& c) {
  while (c.codec->has_message()) {
    c.inbox.push_back(c.codec->pop());
    c.inbox_bytes += c.inbox.back().bytes();
  }
  if (c.codec->dropped_messages() != c.dropped_seen) {
    uint64_t count = c.codec->dropped_messages() - c.dropped_seen;
    uint64_t bytes = c.codec->dropped_bytes() - c.dropped_bytes_seen;
    c.dropped_seen = c.codec->dropped_messages();
    c.dropped_bytes_seen = c.codec->dropped_bytes();
    spdlog::warn("kernel {} channel: {} message(s) over {} bytes skipped ({} bytes)", channel_name(c.which), count,
                 max_message_, bytes);
    if (handler_) handler_->on_kernel_messages_dropped(c.which, count, bytes);
  }
}

bool KernelChannels::deliver(Channel& c, uint64_t& budget) {
  while (!closed_ && !c.failed && !c.holding && !c.inbox.empty()) {
    if (budget == 0) {
      schedule_deferred();
      return false;
    }
    const zmtp::Message& m = c.inbox.front();
    const uint64_t size = m.bytes();
    bool taken = true;
    if (c.which == KernelChannel::hb) {
      ping_outstanding_ = false;
      handler_->on_heartbeat();
    } else {
      auto decoded = jp::decode_view(m.views(), key_);
      if (auto* err = std::get_if<jp::WireError>(&decoded))
        spdlog::warn("kernel {} channel: message dropped: {}", channel_name(c.which), jp::describe(*err));
      else
        taken = handler_->on_kernel_message(c.which, std::get<jp::WireView>(decoded));
    }
    // (Closed meanwhile: the message stays alive until this object goes.)
    if (closed_) return false;
    if (!taken) {
      c.holding = true;
      return false;
    }
    budget -= std::min(budget, size);
    c.inbox_bytes -= size;
    c.inbox.pop_front();
  }
  return true;
}

void KernelChannels::update_reading(Channel& c) {
  bool want = c.connected && !c.failed && !closed_ && c.inbox_bytes < kReadAhead;
  if (want == c.reading || !c.transport) return;
  c.reading = want;
  c.transport->want_readable(want);
}

void KernelChannels::Channel::on_transport_eof() {
  if (owner->closed_ || failed) return;
  owner->disconnect(*this);
}

void KernelChannels::disconnect(Channel& c) {
  if (c.transport) c.transport->close();  // on_transport_closed() counts it
  c.transport = nullptr;
  c.fd = -1;
  c.connecting = c.connected = c.write_blocked = c.reading = c.broken = false;
  c.out.clear();
  // A fresh connection starts with a fresh handshake; what the old one had
  // not sent is lost (as with libzmq), what it received stays in the inbox.
  zmtp::Limits limits;
  limits.max_message = max_message_;
  c.codec = std::make_unique<zmtp::Connection>(c.type, limits);
  c.dropped_seen = c.dropped_bytes_seen = 0;
  if (c.type == zmtp::SocketType::sub) c.codec->subscribe("");
  if (c.which == KernelChannel::hb) ping_outstanding_ = false;
  schedule_retry(c);
}

void KernelChannels::fail(Channel& c, const std::string& why) {
  spdlog::warn("kernel {} channel: {}; the channel is closed", channel_name(c.which), why);
  if (c.transport) c.transport->close();
  c.transport = nullptr;
  c.failed = true;
  c.connected = c.connecting = c.reading = false;
  c.out.clear();
  if (handler_) handler_->on_channel_failed(c.which, why);
}

void KernelChannels::Channel::on_transport_closed() { owner->release_handle(); }

void KernelChannels::release_handle() {
  if (--open_handles_ == 0) delete this;
}

void KernelChannels::schedule_retry(Channel& c) {
  if (closed_ || c.failed) return;
  uint64_t now = uv_now(loop_);
  c.retry_at = now + (now - started_ms_ < kStartWindowMs ? kRetryStartMs : kRetryLaterMs);
  if (!uv_is_active(reinterpret_cast<uv_handle_t*>(&retry_timer_)))
    uv_timer_start(&retry_timer_, on_timer, kRetryStartMs, kRetryStartMs);
}

void KernelChannels::on_timer(uv_timer_t* t) {
  auto* k = static_cast<KernelChannels*>(t->data);
  uint64_t now = uv_now(k->loop_);
  bool waiting = false;
  for (auto& c : k->channels_) {
    if (c.retry_at && now >= c.retry_at) k->attempt(c);
    waiting |= c.retry_at != 0;
    if (k->closed_) return;
  }
  if (!waiting) uv_timer_stop(t);
}

void KernelChannels::schedule_deferred() {
  if (!closed_) uv_idle_start(&deferred_, on_deferred);
}

void KernelChannels::on_deferred(uv_idle_t* t) {
  auto* k = static_cast<KernelChannels*>(t->data);
  uv_idle_stop(t);
  for (auto& c : k->channels_) {
    if (k->closed_) return;
    if (c.broken) k->disconnect(c);
  }
  uint64_t budget = kDeliverTurnBytes;
  for (auto& c : k->channels_) {
    if (k->closed_) return;
    k->deliver(c, budget);
    if (k->closed_) return;
    k->update_reading(c);
  }
}

void KernelChannels::resume(KernelChannel ch) {
  Channel& c = channels_[static_cast<int>(ch)];
  if (!c.holding) return;
  c.holding = false;
  schedule_deferred();
}

bool KernelChannels::send(KernelChannel ch, const jp::WireMessage& m) {
  Channel& c = channels_[static_cast<int>(ch)];
  if (closed_ || c.failed) return false;
  size_t owed = c.out.bytes() + c.codec->output().size() + c.codec->waiting_bytes();
  if (owed >= http::WriteQueue::kHighWater) {
    spdlog::warn("kernel {} channel: the kernel is not reading; a message was not sent", channel_name(ch));
    return false;
  }
  auto frames = jp::encode(m, key_);
  c.codec->send(std::vector<std::string_view>(frames.begin(), frames.end()));
  flush(c);
  return true;
}

bool KernelChannels::ping() {
  Channel& c = channels_[static_cast<int>(KernelChannel::hb)];
  if (closed_ || c.failed || ping_outstanding_) return false;
  c.codec->send({"ping"});
  ping_outstanding_ = true;
  flush(c);
  return true;
}

void KernelChannels::close() {
  if (closed_) return;
  closed_ = true;
  handler_ = nullptr;
  for (auto& c : channels_) {
    if (c.transport) c.transport->close();
    c.transport = nullptr;
  }
  auto on_closed = [](uv_handle_t* h) { static_cast<KernelChannels*>(h->data)->release_handle(); };
  uv_close(reinterpret_cast<uv_handle_t*>(&retry_timer_), on_closed);
  uv_close(reinterpret_cast<uv_handle_t*>(&deferred_), on_closed);
}

}  // namespace execd::runners
