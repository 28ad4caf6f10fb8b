// execd/kernel_channels: see header.
#include "execd/kernel_channels.h"

#include <spdlog/spdlog.h>
#include <zmq.h>

#include <cstring>
#include <variant>
#include <vector>

namespace execd {

namespace jp = protocol::jupyter;

KernelChannels::KernelChannels(uv_loop_t* loop, KernelChannelHandler& handler, std::string key)
    : loop_(loop), handler_(&handler), key_(std::move(key)) {
  memset(polls_, 0, sizeof polls_);
  memset(&deferred_, 0, sizeof deferred_);
}

KernelChannels* KernelChannels::connect(uv_loop_t* loop, void* zmq_ctx, const pty::KernelConnection& conn,
                                        KernelChannelHandler& handler, std::string& error) {
  auto* k = new KernelChannels(loop, handler, conn.key);
  const int types[kCount] = {ZMQ_DEALER, ZMQ_SUB, ZMQ_DEALER, ZMQ_DEALER, ZMQ_REQ};
  const int ports[kCount] = {conn.shell_port, conn.iopub_port, conn.control_port, conn.stdin_port, conn.hb_port};
  bool ok = true;
  for (int i = 0; i < kCount && ok; ++i) {
    void* s = zmq_socket(zmq_ctx, types[i]);
    if (!s) {
      error = std::string("zmq_socket: ") + zmq_strerror(zmq_errno());
      ok = false;
      break;
    }
    k->sockets_[i] = s;
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    // Output is never dropped for want of queue space: iopub carries every
    // display_data, and the stream's own backpressure decides what waits.
    zmq_setsockopt(s, ZMQ_RCVHWM, &zero, sizeof zero);
    if (types[i] == ZMQ_SUB) zmq_setsockopt(s, ZMQ_SUBSCRIBE, "", 0);
    if (zmq_connect(s, conn.endpoint(ports[i]).c_str()) != 0) {
      error = std::string("zmq_connect: ") + zmq_strerror(zmq_errno());
      ok = false;
      break;
    }
    int fd = -1;
    size_t len = sizeof fd;
    if (zmq_getsockopt(s, ZMQ_FD, &fd, &len) != 0 || uv_poll_init(loop, &k->polls_[i], fd) != 0) {
      error = "cannot watch a ZeroMQ socket";
      ok = false;
      break;
    }
    k->polls_[i].data = k;
    ++k->open_handles_;
    uv_poll_start(&k->polls_[i], UV_READABLE, on_poll);
  }
  uv_idle_init(loop, &k->deferred_);
  k->deferred_.data = k;
  ++k->open_handles_;
  if (!ok) {
    k->close();
    return nullptr;
  }
  // Anything that arrived while connecting came with an edge nobody saw.
  k->schedule_drain();
  return k;
}

void KernelChannels::on_poll(uv_poll_t* p, int, int) {
  auto* k = static_cast<KernelChannels*>(p->data);
  k->drain(static_cast<int>(p - k->polls_));
}

void KernelChannels::on_deferred(uv_idle_t* t) {
  auto* k = static_cast<KernelChannels*>(t->data);
  uv_idle_stop(t);
  k->drain_all();
}

void KernelChannels::schedule_drain() {
  if (!closed_) uv_idle_start(&deferred_, on_deferred);
}

void KernelChannels::drain_all() {
  for (int i = 0; i < kCount && !closed_; ++i) drain(i);
}

KernelChannels::Received& KernelChannels::Received::operator=(Received&& other) noexcept {
  if (this != &other) {
    clear();
    parts = std::move(other.parts);
    other.parts.clear();
  }
  return *this;
}

void KernelChannels::Received::clear() {
  for (auto& p : parts) zmq_msg_close(&p);
  parts.clear();
}

std::vector<std::string_view> KernelChannels::Received::views() const {
  std::vector<std::string_view> v;
  v.reserve(parts.size());
  for (const auto& p : parts)
    v.emplace_back(static_cast<const char*>(zmq_msg_data(const_cast<zmq_msg_t*>(&p))),
                   zmq_msg_size(const_cast<zmq_msg_t*>(&p)));
  return v;
}

bool KernelChannels::deliver(int i, const Received& m) {
  auto ch = static_cast<KernelChannel>(i);
  auto decoded = jp::decode_view(m.views(), key_);
  if (auto* err = std::get_if<jp::WireError>(&decoded)) {
    spdlog::warn("kernel channel {}: message dropped: {}", i, jp::describe(*err));
    return true;
  }
  return handler_->on_kernel_message(ch, std::get<jp::WireView>(decoded));
}

void KernelChannels::resume(KernelChannel ch) {
  if (holding_[static_cast<int>(ch)]) schedule_drain();
}

void KernelChannels::drain(int i) {
  if (closed_ || draining_) return;
  draining_ = true;
  void* s = sockets_[i];
  size_t taken = 0;
  if (holding_[i]) {
    // The message the handler left: again, before anything newer.
    if (!deliver(i, held_[i])) {
      draining_ = false;
      return;
    }
    holding_[i] = false;
    held_[i].clear();
  }
  Received m;
  while (!closed_) {
    // A kernel printing as fast as it can must not hold the loop: after a
    // turn's worth, the rest waits for the next iteration, so the clients,
    // other kernels and the log's write completions get theirs.
    if (taken >= kDrainTurnBytes) {
      schedule_drain();
      break;
    }
    int events = 0;
    size_t len = sizeof events;
    if (zmq_getsockopt(s, ZMQ_EVENTS, &events, &len) != 0 || !(events & ZMQ_POLLIN)) break;
    m.clear();
    bool more = true, failed = false;
    while (more) {
      m.parts.emplace_back();
      zmq_msg_t& part = m.parts.back();
      zmq_msg_init(&part);
      if (zmq_msg_recv(&part, s, ZMQ_DONTWAIT) < 0) {
        failed = true;
        break;
      }
      taken += zmq_msg_size(&part);
      more = zmq_msg_more(&part);
    }
    if (failed) break;
    if (static_cast<KernelChannel>(i) == KernelChannel::hb) {
      ping_outstanding_ = false;
      handler_->on_heartbeat();
      continue;
    }
    if (!deliver(i, m)) {
      holding_[i] = true;
      held_[i] = std::move(m);
      break;
    }
  }
  draining_ = false;
}

bool KernelChannels::send(KernelChannel ch, const jp::WireMessage& m) {
  if (closed_) return false;
  void* s = sockets_[static_cast<int>(ch)];
  auto frames = jp::encode(m, key_);
  bool ok = true;
  for (size_t i = 0; i < frames.size() && ok; ++i)
    ok = zmq_send(s, frames[i].data(), frames[i].size(), (i + 1 < frames.size() ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) >= 0;
  if (!ok) spdlog::warn("kernel channel send failed: {}", zmq_strerror(zmq_errno()));
  // A send can swallow the read edge of ZMQ_FD: look again soon.
  schedule_drain();
  return ok;
}

bool KernelChannels::ping() {
  if (closed_ || ping_outstanding_) return false;
  void* s = sockets_[static_cast<int>(KernelChannel::hb)];
  if (zmq_send(s, "ping", 4, ZMQ_DONTWAIT) < 0) return false;
  ping_outstanding_ = true;
  schedule_drain();
  return true;
}

void KernelChannels::close() {
  if (closed_) return;
  closed_ = true;
  handler_ = nullptr;
  for (int i = 0; i < kCount; ++i) {
    held_[i].clear();
    holding_[i] = false;
  }
  auto on_closed = [](uv_handle_t* h) {
    auto* k = static_cast<KernelChannels*>(h->data);
    if (--k->open_handles_ == 0) delete k;
  };
  for (int i = 0; i < kCount; ++i) {
    if (!sockets_[i]) continue;
    if (polls_[i].data == this) uv_close(reinterpret_cast<uv_handle_t*>(&polls_[i]), on_closed);
    // uv_close has already taken the fd out of epoll.
    zmq_close(sockets_[i]);
    sockets_[i] = nullptr;
  }
  if (deferred_.data == this) {
    uv_close(reinterpret_cast<uv_handle_t*>(&deferred_), on_closed);
  } else if (open_handles_ == 0) {
    delete this;
  }
}

}  // namespace execd
