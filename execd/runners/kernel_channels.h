// execd/runners/kernel_channels: the five connections to one Jupyter kernel (shell,
// control and stdin as DEALER, iopub as SUB, heartbeat as REQ), speaking
// ZMTP 3 (protocol/zmtp) over the kernel's Unix or loopback TCP sockets on
// execd's libuv loop: no ZeroMQ library and no threads. Each connection is an
// http::SocketTransport with its own write queue; messages are decoded and
// verified by protocol/jupyter straight from the received frames (a kernel's
// print of 128 MiB is never copied whole).
//
// Backpressure both ways: a connection stops reading while more than
// kReadAhead bytes of complete messages wait for the handler (the kernel's
// own queue then fills, as with any ZeroMQ peer); a handler that cannot take
// a message yet (its output is waiting for the disk) says so, and the same
// message comes again after resume(). send() refuses once a connection owes
// the kernel more than a write queue's high-water mark.
//
// A kernel binds its sockets some time after it starts: until then, and
// after a connection drops, each channel tries again every 25 ms (100 ms
// after the first 5 s). A kernel that breaks the wire protocol on a channel
// is reported once through on_channel_failed() and that channel stays shut.
//
// Ownership: the owner calls close() instead of deleting; the object frees
// itself once libuv has closed its handles. The handler is never called
// after close().
#pragma once

#include <uv.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "execd/http/socket.h"
#include "execd/http/write_queue.h"
#include "protocol/jupyter.h"
#include "protocol/zmtp.h"
#include "pty/kernel.h"

namespace execd::runners {

enum class KernelChannel : uint8_t { shell = 0, iopub = 1, control = 2, stdin_ = 3, hb = 4 };
const char* channel_name(KernelChannel ch);

class KernelChannelHandler {
 public:
  virtual ~KernelChannelHandler() = default;
  // False: not (entirely) taken yet; the same message comes again after
  // resume(ch), with the same frames.
  virtual bool on_kernel_message(KernelChannel ch, const protocol::jupyter::WireView& m) = 0;
  virtual void on_heartbeat() = 0;
  // `count` messages over the size limit (`bytes` in all) were skipped unread.
  virtual void on_kernel_messages_dropped(KernelChannel ch, uint64_t count, uint64_t bytes) = 0;
  // The kernel broke the wire protocol on `ch`; that channel is closed.
  virtual void on_channel_failed(KernelChannel ch, const std::string& why) = 0;
};

class KernelChannels {
 public:
  // Starts connecting; nullptr (with `error`) only for an endpoint execd
  // cannot use. `max_message` bounds one received message.
  static KernelChannels* connect(uv_loop_t* loop, const pty::KernelConnection& conn, KernelChannelHandler& handler,
                                 uint64_t max_message, std::string& error);

  // False when the message was not queued (the channel owes too much already,
  // or failed).
  bool send(KernelChannel ch, const protocol::jupyter::WireMessage& m);
  // One heartbeat ping; false while the previous one is unanswered.
  bool ping();
  // The handler can take the message it left on `ch` now.
  void resume(KernelChannel ch);
  void close();

  // Complete messages held back at most, per channel, before reading stops.
  static constexpr uint64_t kReadAhead = 4 << 20;

 private:
  static constexpr int kCount = 5;
  // Bytes of kernel messages one delivery pass hands on before yielding.
  static constexpr uint64_t kDeliverTurnBytes = 2 << 20;

  struct Channel final : http::TransportEvents {
    KernelChannels* owner = nullptr;
    KernelChannel which{};
    protocol::zmtp::SocketType type{};
    std::unique_ptr<protocol::zmtp::Connection> codec;
    http::SocketTransport* transport = nullptr;
    int fd = -1;
    http::WriteQueue out;
    std::deque<protocol::zmtp::Message> inbox;  // complete, not yet taken
    uint64_t inbox_bytes = 0;
    uint64_t dropped_seen = 0, dropped_bytes_seen = 0;  // the codec's counts already reported
    bool connecting = false, connected = false, write_blocked = false, reading = false;
    bool holding = false;     // the handler left inbox.front() for later
    bool broken = false;      // a write failed: reconnect at the next pass
    bool failed = false;      // protocol error: shut for good
    uint64_t retry_at = 0;    // loop ms of the next connect attempt (0: none due)

    void on_transport_data(const char* data, size_t len) override;
    void on_transport_eof() override;
    void on_transport_writable() override;
    void on_transport_closed() override;
  };

  KernelChannels(uv_loop_t* loop, KernelChannelHandler& handler, const pty::KernelConnection& conn,
                 uint64_t max_message);
  ~KernelChannels() = default;
  static void on_timer(uv_timer_t* t);
  static void on_deferred(uv_idle_t* t);

  void attempt(Channel& c);
  void connected(Channel& c);
  void disconnect(Channel& c);
  void fail(Channel& c, const std::string& why);
  void flush(Channel& c);
  void take_messages(Channel& c);
  void update_reading(Channel& c);
  // Hands waiting messages to the handler; false when it stopped for the turn.
  bool deliver(Channel& c, uint64_t& budget);
  void schedule_deferred();
  void schedule_retry(Channel& c);
  void release_handle();

  uv_loop_t* loop_;
  KernelChannelHandler* handler_;
  std::string key_;
  pty::KernelConnection conn_;
  uint64_t max_message_;
  Channel channels_[kCount];
  uv_timer_t retry_timer_;
  uv_idle_t deferred_;
  uint64_t started_ms_ = 0;
  int open_handles_ = 0;  // libuv handles and transports not yet closed
  bool closed_ = false;
  bool ping_outstanding_ = false;
};

}  // namespace execd::runners
