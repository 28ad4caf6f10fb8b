// pty/bash_session: see header.
#include "pty/bash_session.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include "fs/small_file.h"
#include "fs/pool_job.h"
#include "pty/pty_session.h"

namespace execd::pty {

namespace {
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  out += '\'';
  return out;
}

// Writes all of `data` to a non-blocking pipe; the lines execd sends are tiny
// compared with the pipe buffer, so EAGAIN means the shell is wedged.
bool write_all(int fd, const std::string& data) { return fs::write_all(fd, data) == 0; }

// Set up once per shell: aliases work in a non-interactive shell, and SIGUSR1
// unwinds the run (the timeout's soft stop): it returns from the current
// function or sourced file and installs a DEBUG trap (inherited by functions
// through `set -T`) that returns again before every further command, so no
// caller continues; the trailer at top level is unaffected.
const char kShellSetup[] =
    "\\builtin shopt -s expand_aliases\n"
    "\\builtin trap '\\builtin set -T; \\builtin trap \"\\\\builtin return 124 2>/dev/null\" DEBUG; "
    "\\builtin return 124 2>/dev/null' USR1\n";
// After a timed-out run: stop popping.
const char kShellUnwindDone[] = "\\builtin trap - DEBUG; \\builtin set +T\n";
}  // namespace

BashSession::BashSession(Runtime& rt, std::string scratch_dir, std::string name)
    : rt_(rt), loop_(rt.loop), scratch_dir_(std::move(scratch_dir)), name_(std::move(name)) {
  uv_timer_init(loop_, &timer_);
  timer_.data = this;
  rt_.containment.add_freeze_listener(this);
}

void BashSession::timer_fired(uv_timer_t* t) { static_cast<BashSession*>(t->data)->on_timer(); }

void BashSession::on_freeze() {
  held_timer_ = timer_running_ ? hold_timer(&timer_) : 0;
}

void BashSession::on_thaw(uint64_t frozen_ms) {
  if (held_timer_) resume_timer(&timer_, held_timer_, timer_fired);
  held_timer_ = 0;
  // A stop already under way gets its grace period in unfrozen time too.
  if (kill_start_ns_) kill_start_ns_ += frozen_ms * 1000000;
}

bool BashSession::start(const std::string& shell, const std::vector<std::string>& env, const std::string& cwd,
                        std::string& error) {
  int status_pipe[2];
  if (pipe2(status_pipe, O_CLOEXEC) != 0) {
    error = std::string("pipe: ") + strerror(errno);
    return false;
  }
  SpawnOptions opts;
  opts.program = shell;
  opts.argv = {shell, "--noprofile", "--norc"};
  opts.env = env;
  opts.cwd = cwd;
  opts.pipe_stdin = true;
  opts.new_session = true;
  opts.extra_fd3 = status_pipe[1];
  opts.isolated = isolated_;
  opts.uid = uid_;
  opts.gid = gid_;
  cmd_ = Command::start(rt_, opts, CommandLimits{0, 0, {}}, this, error);
  ::close(status_pipe[1]);
  if (!cmd_) {
    ::close(status_pipe[0]);
    return false;
  }
  pid_ = cmd_->pid();
  fcntl(status_pipe[0], F_SETFL, fcntl(status_pipe[0], F_GETFL) | O_NONBLOCK);
  status_ = OutputPump::open(
      loop_, status_pipe[0], [this](const uint8_t* d, size_t n) { on_status_data(d, n); },
      [this] { on_status_eof(); });
  if (!write_all(cmd_->stdin_fd(), kShellSetup)) {
    error = "cannot set up the shell";
    kill_all();
    return false;
  }
  return true;
}

std::string BashSession::next_run_file() {
  return scratch_dir_ + "/" + name_ + "-" + std::to_string(++run_counter_) + ".sh";
}

BashSession::PreparedRun BashSession::prepare_run(std::string file, pid_t shell_pid, const std::string& command,
                                                  int64_t timeout_ms, std::optional<std::pair<uid_t, gid_t>> owner) {
  PreparedRun p;
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    p.error = "cannot write the run script: " + std::string(strerror(errno));
    return p;
  }
  if (owner && fchown(fd, owner->first, owner->second) != 0) {
    p.error = "cannot hand the run script to the shell's user: " + std::string(strerror(errno));
    ::close(fd);
    ::unlink(file.c_str());
    return p;
  }
  std::string body = command;
  if (body.empty() || body.back() != '\n') body += '\n';
  bool ok = write_all(fd, body);
  ::close(fd);
  if (!ok) {
    p.error = "cannot write the run script";
    ::unlink(file.c_str());
    return p;
  }
  p.file = file;
  if (timeout_ms > 0 && shell_pid > 0) p.preexisting = session_processes(shell_pid);
  return p;
}

void BashSession::discard(const PreparedRun& prepared) {
  if (!prepared.file.empty()) ::unlink(prepared.file.c_str());
}

BashSession::RunStatus BashSession::run(PreparedRun prepared, const std::string& cwd, int64_t timeout_ms,
                                        BashListener* listener, std::string& error) {
  if (!alive() || run_active_ || prepared.file.empty()) {
    discard(prepared);
    if (prepared.file.empty()) {
      error = prepared.error;
      return RunStatus::failed;
    }
    return alive() ? RunStatus::busy : RunStatus::dead;
  }
  // Whatever background jobs wrote since the last run is not this run's.
  cmd_->set_paused(false);
  cmd_->drain_output();
  run_file_ = prepared.file;
  std::string line = "{ ";
  if (!cwd.empty()) line += "\\builtin cd -- " + shell_quote(cwd) + " && ";
  // Inside an isolated session the script is where the session sees the scratch directory.
  std::string script = run_file_;
  if (!scratch_inside_.empty() && script.compare(0, scratch_dir_.size(), scratch_dir_) == 0)
    script = scratch_inside_ + script.substr(scratch_dir_.size());
  line += "\\builtin source " + shell_quote(script) + "; } </dev/null 3>&-\n";
  line += "\\builtin printf '%d\\n' \"$?\" >&3\n";

  run_active_ = true;
  status_seen_ = false;
  timed_out_ = false;
  interrupted_ = false;
  status_buf_.clear();
  listener_ = listener;
  run_start_ns_ = uv_hrtime();
  preexisting_.clear();
  if (timeout_ms > 0) {
    preexisting_.insert(prepared.preexisting.begin(), prepared.preexisting.end());
    uv_timer_start(&timer_, timer_fired, static_cast<uint64_t>(timeout_ms), 0);
    timer_running_ = true;
  }
  if (!write_all(cmd_->stdin_fd(), line)) {
    // The shell is not reading its channel: it cannot run anything again.
    kill_all();
  }
  return RunStatus::started;
}

void BashSession::on_timer() {
  uint64_t now = uv_hrtime();
  if (!timed_out_) {
    timed_out_ = true;
    kill_start_ns_ = now;
  }
  timer_running_ = false;
  if (!run_active_ || shell_exited_) return;
  if (static_cast<int64_t>((now - kill_start_ns_) / 1000000) >= kTimeoutGraceMs) {
    kill_all();  // the run would not stop: the shell goes, and the session with it
    return;
  }
  // The trap first, so a shell waiting for a child runs it as soon as the
  // child dies; then the run's processes, found by a /proc scan on the
  // threadpool (it reads a file per process: not for the loop thread).
  kill(pid_, SIGUSR1);
  start_kill_scan();
}

namespace {
struct KillScan {
  BashSession* session;
  pid_t shell;
  std::set<pid_t> spare;
};
}  // namespace

void BashSession::start_kill_scan() {
  fs::queue_job<KillScan>(
      loop_, std::make_unique<KillScan>(KillScan{this, pid_, preexisting_}),
      [](KillScan& j) {
        for (pid_t p : session_processes(j.shell))
          if (p != j.shell && !j.spare.count(p)) kill(p, SIGKILL);
      },
      [](KillScan& j, int) { j.session->kill_scan_done(); });
  ++scans_in_flight_;
}

void BashSession::kill_scan_done() {
  if (scans_in_flight_ > 0) --scans_in_flight_;
  if (destroyed_) {
    if (scans_in_flight_ == 0 && timer_closed_) delete this;
    return;
  }
  if (!run_active_ || shell_exited_) return;
  // Again in 50 ms: each trap `return` pops one function level.
  uv_timer_start(&timer_, [](uv_timer_t* t) { static_cast<BashSession*>(t->data)->on_timer(); }, 50, 0);
  timer_running_ = true;
}

bool BashSession::interrupt() {
  if (!run_active_ || shell_exited_) return false;
  if (timed_out_) return true;  // already being stopped
  interrupted_ = true;
  stop_timer();
  on_timer();
  return true;
}

void BashSession::stop_timer() {
  if (timer_running_) uv_timer_stop(&timer_);
  timer_running_ = false;
}

void BashSession::on_status_data(const uint8_t* data, size_t len) {
  status_buf_.append(reinterpret_cast<const char*>(data), len);
  size_t nl;
  while ((nl = status_buf_.find('\n')) != std::string::npos) {
    std::string line = status_buf_.substr(0, nl);
    status_buf_.erase(0, nl + 1);
    if (!run_active_ || status_seen_) continue;
    status_code_ = atoi(line.c_str());
    status_seen_ = true;
  }
  if (status_seen_) try_complete();
}

void BashSession::on_status_eof() {
  // The shell is exiting; its exit status ends the run (on_finished).
  if (status_) {
    status_->close();
    status_ = nullptr;
  }
}

void BashSession::try_complete() {
  if (!run_active_ || !status_seen_ || !cmd_) return;
  cmd_->drain_output();
  if (cmd_->paused()) return;  // resumed by set_paused(false)
  RunOutcome o;
  if (timed_out_) {
    o.timed_out = true;
    o.signal = SIGKILL;
  } else {
    o.exit_code = status_code_;
  }
  complete(o);
}

void BashSession::complete(RunOutcome o) {
  if (interrupted_) {
    o.interrupted = true;
    o.timed_out = false;
  }
  stop_timer();
  run_active_ = false;
  o.duration_ms = static_cast<int64_t>((uv_hrtime() - run_start_ns_) / 1000000);
  cleanup_run_file();
  BashListener* l = listener_;
  listener_ = nullptr;
  if (cmd_) cmd_->set_paused(false);
  if (timed_out_ && cmd_ && !shell_exited_ && !write_all(cmd_->stdin_fd(), kShellUnwindDone)) kill_all();
  if (l) l->on_run_finished(o);
  if (shell_exited_ && !gone_reported_ && !run_active_) {
    gone_reported_ = true;
    if (on_gone_) on_gone_();  // may destroy this session: nothing after it
  }
}

void BashSession::cleanup_run_file() {
  if (!run_file_.empty()) ::unlink(run_file_.c_str());
  run_file_.clear();
}

void BashSession::on_output(Stream s, const uint8_t* data, size_t len) {
  if (run_active_ && listener_) listener_->on_run_output(s, data, len);
}

void BashSession::set_paused(bool paused) {
  if (!cmd_) return;
  cmd_->set_paused(paused && listener_ != nullptr);
  if (!paused) try_complete();
}

void BashSession::detach_listener() {
  listener_ = nullptr;
  if (cmd_) cmd_->set_paused(false);
  try_complete();
}

void BashSession::kill_all() {
  // The cgroup also holds what left the session (setsid, double forks).
  if (cmd_ && cmd_->cgroup()) cmd_->cgroup()->kill_all();
  // Without cgroups: the keeper's tree (pty/keeper) is that too.
  if (cmd_ && cmd_->tree()) cmd_->tree()->kill_all();
  if (pid_ > 0 && !shell_exited_) kill_session(pid_, SIGKILL);
}

void BashSession::release_shell() {
  if (cmd_) {
    cmd_->release();
    cmd_ = nullptr;
  }
  if (status_) {
    status_->close();
    status_ = nullptr;
  }
}

void BashSession::on_finished(const Outcome& outcome) {
  shell_exited_ = true;
  shell_outcome_ = outcome;
  release_shell();
  if (run_active_) {
    RunOutcome o;
    o.shell_exited = true;
    o.timed_out = timed_out_;
    if (status_seen_ && !timed_out_) {
      o.exit_code = status_code_;
    } else if (!timed_out_) {
      o.exit_code = outcome.exit_code;
      o.signal = outcome.signal;
    } else {
      o.signal = SIGKILL;
    }
    complete(o);  // reports gone as well
    return;
  }
  if (!gone_reported_) {
    gone_reported_ = true;
    if (on_gone_) on_gone_();  // may destroy this session: nothing after it
  }
}

void BashSession::destroy() {
  if (destroyed_) return;
  destroyed_ = true;
  rt_.containment.remove_freeze_listener(this);
  if (BashListener* l = std::exchange(listener_, nullptr)) {
    // A run still on ends with the shell: killed.
    RunOutcome o;
    o.signal = SIGKILL;
    o.shell_exited = true;
    o.duration_ms = static_cast<int64_t>((uv_hrtime() - run_start_ns_) / 1000000);
    l->on_run_finished(o);
  }
  on_gone_ = nullptr;
  release_shell();
  cleanup_run_file();
  stop_timer();
  // Freed once the timer is closed and no /proc scan job still points here.
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), [](uv_handle_t* h) {
    auto* self = static_cast<BashSession*>(h->data);
    self->timer_closed_ = true;
    if (self->scans_in_flight_ == 0) delete self;
  });
}

}  // namespace execd::pty
