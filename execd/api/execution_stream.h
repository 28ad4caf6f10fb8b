// execd/api/execution_stream: one execution's events as an HTTP response
// (the Source of /command and /session/{id}/run streams), in either framing:
// the head, `init` and keepalive pings (every 3 s, on the server tick),
// output events, and the terminal event that ends the response.
//
// The execution itself (a command record, a bash session run) outlives the
// stream and is linked to it: it pushes output in, and hears from the stream
// only "client behind / caught up" (set_client_paused) and "client gone".
// This is the one place where output backpressure is decided for executions.
//
// A producer that cannot pause (a Jupyter kernel) asks for spill_to(): once
// the client is behind, later output goes to a SpillFile and reaches the
// connection as file ranges, in order, as the client catches up. When the
// spill cannot take more (its limit, a failing disk) the producer hears
// output_overflow() and ends the stream with a structured error; whatever
// was accepted before still reaches the client first. Nothing is dropped
// without the client being told.
#pragma once

#include <uv.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "execd/context.h"
#include "execd/http/exchange.h"
#include "execd/link.h"
#include "protocol/envelope.h"

namespace execd::api {

class ExecutionStream;
class SpillFile;

// Whatever produces an execution's output.
class ExecutionProducer {
 public:
  virtual ~ExecutionProducer() = default;
  virtual void set_client_paused(bool paused) = 0;
  // The stream is gone (its link is already cut).
  virtual void client_gone() = 0;
  // Spilled streams: the client is too far behind for the output to be kept
  // (`reason` says how). The producer should end the stream (event(),
  // finish_with()) and stop its execution; a stream still open afterwards
  // is ended without a terminal event.
  virtual void output_overflow(const std::string& reason) {}
  Link<ExecutionStream> stream;
};

class ExecutionStream final : public http::Source {
 public:
  static constexpr uint64_t kPingIntervalMs = 3000;

  ExecutionStream(http::Exchange& ex, protocol::Framing framing);
  ~ExecutionStream() override;

  // Links `producer` to this stream, writes the head, `init` with `id`, and
  // the first ping.
  void start(ExecutionProducer& producer, std::string_view id, std::vector<std::string> extra_headers = {});
  void output(protocol::OutputStream s, const uint8_t* data, size_t len);
  // Flushes held-back output, writes the terminal event, ends the response.
  void finish(const protocol::ExecutionResult& result);
  // A ready-made event (code executions: result, error, execution_count).
  void event(std::string_view json_object);
  // Flushes held-back output, writes `json_object` as the terminal event, ends.
  void finish_with(std::string_view json_object);
  protocol::EventEncoder& encoder() { return enc_; }
  // Background commands: the stream only says that the command started.
  void finish_background();
  // The producer cannot pause: when the client is behind, output goes to an
  // anonymous file under `dir`, at most `limit` bytes (0: none; the first
  // output the client is behind on overflows).
  void spill_to(uv_loop_t* loop, std::string dir, uint64_t limit);

  // Source
  void proceed() override;
  void stop() override;
  void tick(uint64_t now_ms) override;

  Link<ExecutionProducer> producer;

 private:
  // Marks the stream ended, cuts the producer and flushes held-back output
  // into `buf`; false if it had already ended.
  bool begin_ending(std::string& buf, int64_t now);
  void drop_producer();
  // Every encoded byte goes out through here: to the connection, or to the
  // spill while the client is behind, or (after an overflow) to the tail.
  void deliver(std::string&& buf);
  // The last bytes: once everything spilled has gone to the connection.
  void end_response(std::string&& buf);
  // Hands durable spilled ranges to the connection until it is full.
  void hand_over();
  void overflow(const std::string& reason);

  http::Exchange& ex_;
  protocol::EventEncoder enc_;
  uint64_t last_ping_ms_ = 0;
  bool ended_ = false;

  // Spilling (see spill_to)
  bool spill_allowed_ = false;
  uv_loop_t* spill_loop_ = nullptr;
  std::string spill_dir_;
  uint64_t spill_limit_ = 0;
  std::shared_ptr<SpillFile> spill_;
  uint64_t handed_ = 0;         // spilled bytes given to the connection
  bool spilling_ = false;       // the client is behind: output goes to the spill
  bool waiting_ = false;        // the connection is full; proceed() is owed
  bool overflowed_ = false;     // output past the spill was refused
  bool end_pending_ = false;    // end with end_tail_ once the spill is handed over
  std::string end_tail_;
};

// Fills `signal` ("SIGKILL") and `signal_text` ("killed") of a result.
void set_signal(protocol::ExecutionResult& r, int signal);

// Exact framing when the server is configured for it or the client asks
// with `Accept: application/x-ndjson`.
protocol::Framing framing_for(const Context& ctx, const http::Exchange& ex);

}  // namespace execd::api
