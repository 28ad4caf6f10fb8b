// execd/envd/process_input: input to an E2B process (api/envd/process's
// SendInput and StreamInput): why input cannot go to a process, and the
// two waits that hold a writer while the process has more than
// kStdinQueue bytes of input unread (checked on the server tick), each
// ended with an error after --stdin-timeout.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "execd/envd/processes.h"
#include "execd/http/exchange.h"
#include "protocol/connect.h"

namespace execd::envd {

constexpr size_t kStdinQueue = 256 << 10;  // input waiting for the process before a writer waits

// Why input cannot go to `e` now, if it cannot.
std::optional<protocol::connect::Error> input_refused(const exec::Execution& e, uint32_t pid);

// A SendInput that put the process's queue over kStdinQueue: answered once
// the process has read it down (checked on the server tick), or with an
// error after --stdin-timeout.
class InputWaiter final : public http::Source {
 public:
  InputWaiter(EnvdProcesses& svc, http::Exchange& ex, std::string exec_id);
  void tick(uint64_t now_ms) override;

 private:
  EnvdProcesses& svc_;
  http::Exchange& ex_;
  std::string exec_id_;
  uint64_t since_;
};

// StreamInput's request body: start{process}, then data messages, written
// to the process as they come; the body is paused while more than
// kStdinQueue bytes wait for the process (checked on the server tick).
class StreamInputBody final : public http::Source {
 public:
  StreamInputBody(EnvdProcesses& svc, http::Exchange& ex);
  void on_body(const char* data, size_t len) override;
  // The whole body is in: the call's answer.
  void complete();
  void tick(uint64_t now_ms) override;

 private:
  bool message(std::string_view payload);
  // Answered at once; the rest of the body is not read (the connection
  // closes after the answer).
  void fail(const protocol::connect::Error& e);

  EnvdProcesses& svc_;
  http::Exchange& ex_;
  protocol::connect::EnvelopeReader reader_;
  std::string exec_id_;
  uint32_t pid_ = 0;
  bool paused_ = false, failed_ = false;
  uint64_t paused_since_ = 0;
};

}  // namespace execd::envd
