// execd/kernel_channels: the five ZeroMQ sockets to one kernel (shell,
// control and stdin as DEALER, iopub as SUB, heartbeat as REQ) on execd's
// libuv loop. Each socket's ZMQ_FD is watched with a uv_poll_t; that fd is
// edge-triggered, so every wake-up (and every send, which can consume an
// edge) is followed by draining ZMQ_EVENTS / ZMQ_DONTWAIT until the socket
// reports nothing more. Messages are decoded and verified by
// protocol/jupyter, in place: the handler sees views into ZeroMQ's own frames
// (a kernel's print of 128 MiB is never copied whole). A handler that cannot
// take a message yet (its output is waiting for the disk) says so; the
// channel then keeps that message, reads nothing more from that socket, and
// hands the same message again after resume().
//
// Ownership: the owner calls close() instead of deleting; the object frees
// itself once libuv has closed its poll handles. The handler is never called
// after close().
#pragma once

#include <uv.h>

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include <zmq.h>

#include "protocol/jupyter.h"
#include "pty/kernel.h"

namespace execd {

enum class KernelChannel : uint8_t { shell = 0, iopub = 1, control = 2, stdin_ = 3, hb = 4 };

class KernelChannelHandler {
 public:
  virtual ~KernelChannelHandler() = default;
  // False: not (entirely) taken yet; the same message comes again after
  // resume(ch), with the same frames.
  virtual bool on_kernel_message(KernelChannel ch, const protocol::jupyter::WireView& m) = 0;
  virtual void on_heartbeat() = 0;
};

class KernelChannels {
 public:
  // `zmq_ctx` outlives every KernelChannels made with it.
  static KernelChannels* connect(uv_loop_t* loop, void* zmq_ctx, const pty::KernelConnection& conn,
                                 KernelChannelHandler& handler, std::string& error);

  bool send(KernelChannel ch, const protocol::jupyter::WireMessage& m);
  // One heartbeat ping; false while the previous one is unanswered.
  bool ping();
  // The handler can take the message it left on `ch` now.
  void resume(KernelChannel ch);
  void close();

 private:
  static constexpr int kCount = 5;
  // Bytes of kernel messages one drain() takes before yielding the loop.
  static constexpr size_t kDrainTurnBytes = 2 << 20;
  KernelChannels(uv_loop_t* loop, KernelChannelHandler& handler, std::string key);
  ~KernelChannels() = default;
  static void on_poll(uv_poll_t* p, int status, int events);
  static void on_deferred(uv_idle_t* t);
  // One received message: ZeroMQ's frames, kept as they came.
  struct Received {
    std::deque<zmq_msg_t> parts;  // (a deque: frames never move once received)
    Received() = default;
    Received(Received&& other) noexcept : parts(std::move(other.parts)) { other.parts.clear(); }
    Received& operator=(Received&& other) noexcept;
    ~Received() { clear(); }
    void clear();
    std::vector<std::string_view> views() const;
  };
  void drain(int i);
  void drain_all();
  void schedule_drain();
  // Decodes and hands `m` over; false when the handler keeps it for later.
  bool deliver(int i, const Received& m);

  uv_loop_t* loop_;
  KernelChannelHandler* handler_;
  std::string key_;
  void* sockets_[kCount] = {};
  Received held_[kCount];     // a message the handler could not take yet
  bool holding_[kCount] = {};
  uv_poll_t polls_[kCount];
  uv_idle_t deferred_;
  int open_handles_ = 0;
  bool closed_ = false;
  bool draining_ = false;
  bool ping_outstanding_ = false;
};

}  // namespace execd
