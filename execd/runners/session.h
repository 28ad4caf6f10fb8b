// execd/runners/session: the runner of POST /session/{id}/run: one run of a
// session's long-lived bash (pty::BashSession). The session's shell is the
// SessionRegistry's; the run is an execution of its own ("<session>.<n>"),
// resumable, recorded and journaled like any other. A shell that goes
// (deleted, dead, daemon exit) ends its run: the shell tells its listener.
#pragma once

#include "execd/exec/execution.h"
#include "pty/bash_session.h"

namespace execd::runners {

class SessionRunner final : public exec::Runner, public pty::BashListener {
 public:
  SessionRunner(exec::RunSink& sink, pty::BashSession& shell) : sink_(sink), shell_(&shell) {}
  ~SessionRunner() override;

  // exec::Runner
  bool pausable() const override { return true; }
  void set_paused(bool paused) override;
  bool interrupt() override;
  int64_t pgid() const override { return shell_ ? shell_->shell_pid() : 0; }
  bool holds_nothing() const override { return !shell_; }

  // pty::BashListener
  void on_run_output(pty::Stream s, const uint8_t* data, size_t len) override;
  void on_run_finished(const pty::RunOutcome& outcome) override;

 private:
  exec::RunSink& sink_;
  pty::BashSession* shell_;  // until the run finished (the shell forgets us then)
};

}  // namespace execd::runners
