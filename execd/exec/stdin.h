// execd/exec/stdin: POST /command/{id}/stdin[?offset=N][&eof=true], the
// Source that streams a request body into an execution's stdin. The body is
// paused while more than kStdinQueue bytes wait for the process to read
// them; a write paused longer than --stdin-timeout answers 503 with the
// offset reached, so the client can retry with ?offset=. One write at a
// time per execution (the execution links it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "execd/exec/execution.h"
#include "execd/http/exchange.h"
#include "execd/link.h"

namespace execd::exec {

class StdinBody final : public http::Source {
 public:
  static constexpr size_t kStdinQueue = 256 << 10;

  // `skip`: leading body bytes accepted before (a retry); `timeout_ms` < 0:
  // wait for ever.
  StdinBody(http::Exchange& ex, Execution& exec, uint64_t skip, bool eof, int64_t timeout_ms);
  ~StdinBody() override;

  void on_body(const char* data, size_t len) override;
  // The request is complete: close stdin if asked, answer the offset.
  void complete();
  // The process took everything queued.
  void drained();
  // Ends the write with an error (the offset reached goes with it).
  void fail(int status, std::string_view code, const std::string& message);

  void stop() override;
  void tick(uint64_t now_ms) override;

 private:
  http::Exchange& ex_;
  Link<Execution> exec_;
  uint64_t skip_;
  bool eof_;
  int64_t timeout_ms_;
  bool paused_ = false;
  uint64_t paused_since_ms_ = 0;
};

// {"offset":N}
std::string stdin_offset_json(uint64_t accepted);

}  // namespace execd::exec
