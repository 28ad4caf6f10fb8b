// execd/runners/command: see header.
#include "execd/runners/command.h"

#include <signal.h>
#include <spdlog/spdlog.h>

namespace execd::runners {

std::unique_ptr<CommandRunner> CommandRunner::start(pty::Runtime& rt, const pty::SpawnOptions& opts,
                                                    const pty::CommandLimits& limits, bool keep_stdin,
                                                    exec::RunSink& sink, std::string& error) {
  std::unique_ptr<CommandRunner> r(new CommandRunner(sink));
  pty::SpawnOptions o = opts;
  if (keep_stdin && !o.use_pty) o.pipe_stdin = true;
  r->cmd_ = pty::Command::start(rt, o, limits, r.get(), error);
  if (!r->cmd_) return nullptr;
  r->pid_ = r->cmd_->pid();
  r->tty_ = o.use_pty;
  r->cgroup_ = r->cmd_->cgroup();
  r->tree_ = r->cmd_->tree();
  r->contained_ = r->cmd_->cgroup() != nullptr || r->cmd_->tree() != nullptr;
  if (keep_stdin) {
    // The pipe's write end is ours now: closed when the client says eof (or
    // the command ends). With a PTY, eof is the terminal's ^D.
    int fd = r->cmd_->take_stdin();
    CommandRunner* self = r.get();
    if (fd >= 0)
      r->stdin_ = pty::FdWriter::open(
          rt.loop, fd,
          [self] {
            self->sink_.stdin_drained();
            if (self->stdin_eof_ && !self->tty_) self->close_stdin_now();
          },
          // Inside the writer's own callback: it is closed later, not here.
          [self](int err) { self->sink_.stdin_closed(err); });
  }
  return r;
}

CommandRunner::~CommandRunner() {
  if (cmd_) cmd_->release();
  if (stdin_) stdin_->close();
}

void CommandRunner::on_output(pty::Stream s, const uint8_t* data, size_t len) {
  sink_.output(s == pty::Stream::out ? exec::kStdout : exec::kStderr, data, len);
}

std::span<uint8_t> CommandRunner::output_room(pty::Stream s) {
  return sink_.output_room(s == pty::Stream::out ? exec::kStdout : exec::kStderr);
}

void CommandRunner::on_finished(const pty::Outcome& o) {
  protocol::ExecutionResult r;
  r.exit_code = o.exit_code;
  exec::set_signal(r, o.signal);
  r.timed_out = o.timed_out;
  r.interrupted = o.interrupted;
  r.execution_time_ms = o.duration_ms;
  r.user_cpu_ms = o.user_cpu_ms;
  r.system_cpu_ms = o.system_cpu_ms;
  r.max_rss_kib = o.max_rss_kib;
  r.leftover_processes = o.leftover_processes;
  r.oom_killed = o.oom_killed;
  r.pids_limit_hit = o.pids_limit_hit;
  // The process is done with us: let go of it and of its stdin. The result
  // goes out first: letting go of the command's cgroup queues pool work, and
  // waking a pool thread (often another CPU) held the terminal event back.
  // The Command outlives this call whatever finish() does to the runner
  // (it frees itself once its handles close, after release()).
  pty::Command* cmd = cmd_;
  cmd_ = nullptr;
  close_stdin_now();
  sink_.finish(std::move(r));
  cmd->release();
}

void CommandRunner::set_paused(bool paused) {
  if (cmd_) cmd_->set_paused(paused);
}

int CommandRunner::left_behind() const {
  if (std::shared_ptr<pty::CommandCgroup> cg = cgroup_.lock()) return cg->population();
  if (std::shared_ptr<pty::KeptTree> t = tree_.lock()) return t->population();
  return 0;
}

bool CommandRunner::signal_left_behind(int sig) {
  if (left_behind() <= 0) return false;
  if (std::shared_ptr<pty::CommandCgroup> cg = cgroup_.lock()) {
    if (sig == SIGKILL) cg->kill_all();
    else cg->signal_all(sig);
  }
  if (std::shared_ptr<pty::KeptTree> t = tree_.lock()) {
    if (sig == SIGKILL) t->kill_all();
    else t->signal_all(sig);
  }
  return true;
}

bool CommandRunner::interrupt() {
  if ((!cmd_ || !cmd_->running()) && left_behind() > 0) {
    // The shell has exited; what it started (servers, `&` jobs) has not.
    return signal_left_behind(SIGKILL);
  }
  if (!cmd_ || !cmd_->running()) return false;
  // Returns at once; the stream reports how it ended.
  cmd_->interrupt();
  return true;
}

void CommandRunner::signal(int sig) {
  if (cmd_ && cmd_->running()) cmd_->signal_group(sig);
}

bool CommandRunner::send_signal(int sig, exec::SignalScope scope) {
  if (scope == exec::SignalScope::leader) {
    if (!cmd_ || !cmd_->running()) return false;
    cmd_->signal_leader(sig);
    return true;
  }
  if (cmd_ && cmd_->running()) {
    cmd_->signal_everything(sig);
    return true;
  }
  // The leader has exited; what it started may not have.
  return signal_left_behind(sig);
}

void CommandRunner::resize(uint16_t rows, uint16_t cols) {
  if (cmd_ && tty_) cmd_->resize(rows, cols);
}

bool CommandRunner::holds_nothing() const {
  if (cmd_) return false;
  return left_behind() == 0;
}

void CommandRunner::describe(nlohmann::ordered_json& status) const {
  if (!contained_) return;
  int left = left_behind();  // gone: removed once empty
  if (left >= 0) status["processes_running"] = left;
}

void CommandRunner::stdin_write(const char* data, size_t len) {
  if (stdin_) stdin_->write(data, len);
}

void CommandRunner::stdin_close() {
  if (!stdin_) return;
  if (tty_) {
    stdin_->write("\x04", 1);  // the terminal stays: the command may still print
    return;
  }
  stdin_eof_ = true;
  if (stdin_->queued() == 0) close_stdin_now();
}

void CommandRunner::close_stdin_now() {
  if (stdin_) stdin_->close();
  stdin_ = nullptr;
}

}  // namespace execd::runners
