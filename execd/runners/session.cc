// execd/runners/session: see header.
#include "execd/runners/session.h"

namespace execd::runners {

SessionRunner::~SessionRunner() {
  if (shell_) shell_->detach_listener();
}

void SessionRunner::set_paused(bool paused) {
  if (shell_) shell_->set_paused(paused);
}

bool SessionRunner::interrupt() { return shell_ && shell_->interrupt(); }

void SessionRunner::on_run_output(pty::Stream s, const uint8_t* data, size_t len) {
  sink_.output(s == pty::Stream::out ? exec::kStdout : exec::kStderr, data, len);
}

void SessionRunner::on_run_finished(const pty::RunOutcome& o) {
  shell_ = nullptr;
  protocol::ExecutionResult r;
  r.exit_code = o.exit_code;
  exec::set_signal(r, o.signal);
  r.timed_out = o.timed_out;
  r.interrupted = o.interrupted;
  r.execution_time_ms = o.duration_ms;
  sink_.finish(std::move(r));
}

}  // namespace execd::runners
