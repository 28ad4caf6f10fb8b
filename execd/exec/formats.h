// execd/exec/formats: how a run's stream looks in each wire dialect, one
// StreamFormat each (exec/reader paces and resumes them all the same way):
//   format_envelope.cc   OpenSandbox's event envelope, compat or exact
//                        framing (protocol/envelope): /command, /session
//                        runs, /code, isolated runs
//   format_envd.cc       E2B envd's process events in Connect envelopes
//                        (protocol/envd, protocol/connect): Start, Connect
//   format_e2b_code.cc   E2B's code-interpreter NDJSON lines
//                        (protocol/e2b_code): /execute
// Each also writes its dialect's terminal event from the run's
// protocol::ExecutionResult.
#pragma once

#include <cstdint>
#include <memory>

#include "execd/exec/reader.h"
#include "protocol/connect.h"
#include "protocol/envelope.h"

namespace execd::exec {

// OpenSandbox's envelope in `framing`; `split_lines` false keeps output
// chunks as they came (compat framing of kernel output).
std::unique_ptr<StreamFormat> envelope_format(protocol::Framing framing, bool split_lines = true);

// E2B's process events: Connect envelopes of StartResponse/ConnectResponse
// ({"event": ProcessEvent}), ending with the end event and an end-of-stream
// message, whose trailing metadata names the bytes a resumed stream could
// not have (ProcessEvent has no place for a gap).
class ProcessEventFormat final : public StreamFormat {
 public:
  // `start`: the stream of the Start call itself, whose deadline
  // (Connect-Timeout-Ms) was the process's timeout; `keepalive_ms` 0:
  // envd's default.
  ProcessEventFormat(uint32_t pid, bool pty, uint64_t keepalive_ms, bool start);
  // A Start stream's format exists before its process has a pid.
  void set_pid(uint32_t pid) { pid_ = pid; }

  const char* content_type() const override { return "application/connect+json"; }
  uint64_t ping_interval_ms() const override { return keepalive_ms_; }
  void begin(std::string& out, std::string_view id, int64_t ts_ms) override;
  void ping(std::string& out, int64_t ts_ms) override;
  void gap(std::string& out, protocol::OutputStream s, uint64_t requested, uint64_t from, int64_t ts_ms) override;
  void output(std::string& out, protocol::OutputStream s, const uint8_t* data, size_t len, int64_t ts_ms) override;
  void terminal(std::string& out, const protocol::ExecutionResult& r, int64_t ts_ms) override;
  void background_ack(std::string& out, int64_t ts_ms) override;
  void overflow(std::string& out, std::string_view message, const protocol::ExecutionResult& r,
                int64_t ts_ms) override;
  void event(std::string&, std::string_view) override {}

 private:
  uint32_t pid_;
  bool pty_, start_;
  uint64_t keepalive_ms_;
  protocol::connect::Metadata gaps_;
};

// E2B's code-interpreter lines.
std::unique_ptr<StreamFormat> e2b_code_format();

}  // namespace execd::exec
