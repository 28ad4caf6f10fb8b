// execd/exec/reader: one HTTP stream of an execution, in either framing: the
// original response of a start (POST /command, /session/{id}/run, /code), a
// retried start that attaches, or GET /command/{id}/stream?stdout=N&stderr=M.
// All three are the same Source: the head, `init` and keepalive pings (every
// StreamFormat::ping_interval_ms, 3 s for the envelope, on the server
// tick, while nothing else is sent), a `gap` for each
// stream that lost bytes the reader asked for, the output from the retained
// log until it is caught up, then live output, then the terminal event.
//
// Pace: while live, output goes from the execution straight to the socket.
// A reader whose socket is full either holds the run (the original stream of
// a run that can pause: the process then blocks on its pipe, as it would
// with the Go daemon) or goes back to the log and catches up from there in
// 256 KiB reads on the threadpool, so a slow reader never slows the run
// unless the log would have to let go of bytes it has not sent (see
// Execution). An original stream of a run that cannot pause ends with an
// OutputOverflow error instead of losing bytes silently.
//
// What the bytes look like is the reader's StreamFormat: the OpenSandbox
// event envelope (protocol/envelope, compat or exact framing) for the
// OpenSandbox API, E2B's process events in Connect envelopes
// (envd/process_start, api/envd/process) and E2B's code-interpreter lines (api/code) for the E2B
// SDKs. Pacing, resume and backpressure are the same for all of them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "execd/exec/execution.h"
#include "execd/http/exchange.h"
#include "execd/link.h"
#include "protocol/envelope.h"

namespace execd::exec {

struct LogRead;

// How one reader writes its stream: appends whole pieces of the response
// body to a caller-owned string; never touches the exchange.
class StreamFormat {
 public:
  virtual ~StreamFormat() = default;
  virtual const char* content_type() const = 0;
  // Keepalive period while nothing else is sent.
  virtual uint64_t ping_interval_ms() const { return 3000; }
  // The start of the body: what the stream is (`id`: the run, or the
  // session or context it ran in), and a first keepalive if the format has one.
  virtual void begin(std::string& out, std::string_view id, int64_t ts_ms) = 0;
  virtual void ping(std::string& out, int64_t ts_ms) = 0;
  // A resumed stream: the next output of `s` is at byte `offset`.
  virtual void start_at(protocol::OutputStream s, uint64_t offset) {}
  // Bytes [requested, available_from) of `s` were asked for and are no longer kept.
  virtual void gap(std::string& out, protocol::OutputStream s, uint64_t requested, uint64_t available_from,
                   int64_t ts_ms) = 0;
  virtual void output(std::string& out, protocol::OutputStream s, const uint8_t* data, size_t len,
                      int64_t ts_ms) = 0;
  // Whatever a stream still holds back (a partial line, a UTF-8 tail).
  virtual void flush(std::string& out, protocol::OutputStream s, int64_t ts_ms) {}
  // The last piece of a run's stream.
  virtual void terminal(std::string& out, const protocol::ExecutionResult& r, int64_t ts_ms) = 0;
  // The whole rest of a background start's stream.
  virtual void background_ack(std::string& out, int64_t ts_ms) = 0;
  // The stream ends early: the client fell too far behind a run that cannot
  // pause (`r` is the result so far).
  virtual void overflow(std::string& out, std::string_view message, const protocol::ExecutionResult& r,
                        int64_t ts_ms) = 0;
  // A structured event from the run's log (a compact JSON object).
  virtual void event(std::string& out, std::string_view json_object) = 0;
};

class ExecutionReader final : public http::Source {
 public:
  static constexpr size_t kReadChunk = 256 << 10;

  enum class Role {
    original,  // the response of the start itself
    attach,    // a retried start with the same id and request: from 0
    resume,    // GET .../stream: from the offsets asked for, exact framing
  };

  ExecutionReader(http::Exchange& ex, Execution& exec, Role role, protocol::Framing framing, uint64_t from_stdout = 0,
                  uint64_t from_stderr = 0, std::vector<std::string> extra_headers = {});
  ExecutionReader(http::Exchange& ex, Execution& exec, Role role, std::unique_ptr<StreamFormat> format,
                  uint64_t from_stdout = 0, uint64_t from_stderr = 0, std::vector<std::string> extra_headers = {});
  ~ExecutionReader() override;

  // The execution started (or ended, or failed to start): head, init,
  // gaps, then output. Once; a reader of a running execution begins at once.
  void begin();
  // The start was refused before anything ran: the same answer as the first.
  void reject(const protocol::ApiError& e);

  // --- from the execution ---
  // New output at combined offset `at` (stored: how much of it the log took).
  void on_output(Channel c, uint64_t stream_at, const uint8_t* data, size_t len, uint64_t stored);
  void on_finished();
  // The log must let go of bytes this reader has not sent.
  void overflow(const std::string& reason);
  // Needs combined bytes before `upto` from the log.
  bool needs(uint64_t upto) const;
  bool holding() const { return mode_ == Mode::holding; }
  bool original() const { return role_ == Role::original; }
  bool ended() const { return mode_ == Mode::done; }

  // Source
  void proceed() override;
  void stop() override;
  void tick(uint64_t now_ms) override;

 private:
  enum class Mode { pending, reading, waiting, live, holding, done };

  void pump();
  void read_done(int err, std::string data);
  void deliver(int s, uint64_t at, const uint8_t* data, uint64_t n, std::string& buf);
  void deliver_events(const uint8_t* data, size_t n, std::string& buf);
  // Sends `buf`; false (and mode set) when the socket is full.
  bool send(std::string&& buf);
  void finish(std::string buf = {});
  void end(std::string buf);
  void detach();

  http::Exchange& ex_;
  Link<Execution> exec_;
  Role role_;
  std::unique_ptr<StreamFormat> enc_;
  std::vector<std::string> extra_headers_;
  Mode mode_ = Mode::pending;
  uint64_t want_[2] = {0, 0};  // next stdout/stderr offset to deliver
  uint64_t pos_ = 0;           // next combined offset to read from the log
  std::string event_carry_;    // an event read in part
  bool skip_event_ = false;    // the log let go of an event's start: drop up to its end
  uint64_t last_ping_ms_ = 0;
  Link<LogRead> read_;  // the log read in flight
  Registry* counted_ = nullptr;  // counts this reader (not an original stream)
};

}  // namespace execd::exec
