// execd/api/execution_stream: one execution's events as an HTTP response
// (the Source of /command and /session/{id}/run streams), in either framing:
// the head, `init` and keepalive pings (every 3 s, on the server tick),
// output events, and the terminal event that ends the response.
//
// The execution itself (a command record, a bash session run) outlives the
// stream and is linked to it: it pushes output in, and hears from the stream
// only "client behind / caught up" (set_client_paused) and "client gone".
// This is the one place where output backpressure is decided for executions.
#pragma once

#include <cstdint>
#include <string_view>

#include "execd/context.h"
#include "execd/http/exchange.h"
#include "execd/link.h"
#include "protocol/envelope.h"

namespace execd::api {

class ExecutionStream;

// Whatever produces an execution's output.
class ExecutionProducer {
 public:
  virtual ~ExecutionProducer() = default;
  virtual void set_client_paused(bool paused) = 0;
  // The stream is gone (its link is already cut).
  virtual void client_gone() = 0;
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

  http::Exchange& ex_;
  protocol::EventEncoder enc_;
  uint64_t last_ping_ms_ = 0;
  bool ended_ = false;
};

// Fills `signal` ("SIGKILL") and `signal_text` ("killed") of a result.
void set_signal(protocol::ExecutionResult& r, int signal);

// Exact framing when the server is configured for it or the client asks
// with `Accept: application/x-ndjson`.
protocol::Framing framing_for(const Context& ctx, const http::Exchange& ex);

}  // namespace execd::api
