// execd/exec/stdin: see header.
#include "execd/exec/stdin.h"

#include <nlohmann/json.hpp>

#include "execd/http/connection.h"
#include "protocol/errors.h"

namespace execd::exec {

std::string stdin_offset_json(uint64_t accepted) { return "{\"offset\":" + std::to_string(accepted) + "}"; }

StdinBody::StdinBody(http::Exchange& ex, Execution& exec, uint64_t skip, bool eof, int64_t timeout_ms)
    : ex_(ex), skip_(skip), eof_(eof), timeout_ms_(timeout_ms) {
  exec.attach_stdin(*this, exec_);
}

StdinBody::~StdinBody() = default;

void StdinBody::on_body(const char* data, size_t len) {
  Execution* e = exec_.get();
  if (!e || !e->stdin_writable()) return;
  if (skip_ >= len) {
    skip_ -= len;
    return;
  }
  data += skip_;
  len -= static_cast<size_t>(skip_);
  skip_ = 0;
  // May fail at once (the process closed its stdin), which ends this write.
  e->stdin_write(data, len);
  e = exec_.get();
  if (!e) return;
  if (!paused_ && e->stdin_queued() > kStdinQueue) {
    paused_ = true;
    paused_since_ms_ = ex_.connection().host().now_ms();
    ex_.pause_body();
  }
}

void StdinBody::drained() {
  if (!paused_) return;
  paused_ = false;
  ex_.resume_body();
}

void StdinBody::complete() {
  Execution* e = exec_.get();
  if (!e) return;
  exec_.cut();
  if (eof_) e->stdin_close();
  ex_.respond_json(200, stdin_offset_json(e->stdin_accepted()));
}

void StdinBody::fail(int status, std::string_view code, const std::string& message) {
  Execution* e = exec_.get();
  if (!e) return;
  uint64_t offset = e->stdin_accepted();
  exec_.cut();
  nlohmann::ordered_json j;
  j["code"] = code;
  j["message"] = message;
  j["offset"] = offset;
  if (paused_) ex_.resume_body();
  ex_.respond_json(status, j.dump());
}

void StdinBody::stop() { exec_.cut(); }

void StdinBody::tick(uint64_t now_ms) {
  if (exec_ && paused_ && timeout_ms_ >= 0 && now_ms - paused_since_ms_ >= static_cast<uint64_t>(timeout_ms_))
    fail(503, protocol::codes::kRuntimeError,
         "the command is not reading its stdin (waited " + std::to_string(timeout_ms_) + " ms)");
}

}  // namespace execd::exec
