// pty/command: see header.
#include "pty/command.h"

#include <fcntl.h>

#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <dirent.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "pty/pump.h"

namespace execd::pty {

namespace {
struct SignalName {
  int sig;
  const char* name;
};
const SignalName kSignals[] = {
    {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
    {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
    {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
    {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGCHLD, "SIGCHLD"},
    {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"}, {SIGTTIN, "SIGTTIN"},
    {SIGTTOU, "SIGTTOU"}, {SIGURG, "SIGURG"},   {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"},
    {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"}, {SIGIO, "SIGIO"},
    {SIGSYS, "SIGSYS"},
};

int64_t timeval_ms(const struct timeval& tv) { return int64_t(tv.tv_sec) * 1000 + tv.tv_usec / 1000; }

// Without a cgroup, what is left of a command is what is left of its process
// group (setsid() children are not counted: they cannot be found).
int count_process_group(pid_t pgid) {
  DIR* d = opendir("/proc");
  if (!d) return -1;
  int n = 0;
  while (struct dirent* e = readdir(d)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    char path[300], buf[512];
    snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ssize_t len = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (len <= 0) continue;
    buf[len] = 0;
    // pid (comm) state ppid pgrp ...: comm may hold anything, so from the last ')'.
    const char* p = strrchr(buf, ')');
    char state = 0;
    int ppid = 0, pgrp = 0;
    if (p && sscanf(p + 1, " %c %d %d", &state, &ppid, &pgrp) == 3 && pgrp == pgid && state != 'Z') ++n;
  }
  closedir(d);
  return n;
}
}  // namespace

const char* signal_name(int sig) {
  for (const auto& s : kSignals)
    if (s.sig == sig) return s.name;
  return "SIGUNKNOWN";
}

std::string signal_description(int sig) {
  std::string s = strsignal(sig);
  if (!s.empty()) s[0] = static_cast<char>(tolower(static_cast<unsigned char>(s[0])));
  return s;
}

int signal_from_name(const std::string& name) {
  std::string n = name.rfind("SIG", 0) == 0 ? name : "SIG" + name;
  for (const auto& s : kSignals)
    if (n == s.name) return s.sig;
  return 0;
}

Command::Command(uv_loop_t* loop, Reaper& reaper, Containment& containment)
    : loop_(loop), reaper_(reaper), containment_(containment) {
  uv_timer_init(loop, &drain_timer_);
  drain_timer_.data = this;
  ++open_handles_;
}

uv_timer_t* Command::timer(uv_timer_t*& slot) {
  if (!slot) {
    slot = new uv_timer_t;
    uv_timer_init(loop_, slot);
    slot->data = this;
    ++open_handles_;
  }
  return slot;
}

Command* Command::start(Runtime& rt, const SpawnOptions& opts, CommandLimits limits, CommandSink* sink,
                        std::string& error) {
  uv_loop_t* loop = rt.loop;
  Reaper& reaper = rt.reaper;
  Containment& containment = rt.containment;
  std::shared_ptr<CommandCgroup> cg;
  if (containment.frozen()) {
    // A child joining a frozen cgroup would stop between vfork and exec,
    // and execd with it.
    error = "execd's processes are frozen (POST /thaw first)";
    return nullptr;
  }
  ChildPlacement place;
  place.setup = &rt.children;
  place.oom_score_adj = kChildOomScoreAdj;
  if (containment.has_cgroups() || limits.resources.any()) {
    std::string cg_error;
    cg = containment.create(limits.resources, cg_error);
    // Limits asked for and not applicable: not started. Otherwise a cgroup
    // that cannot be made leaves this one command a process group.
    if (!cg && limits.resources.any()) {
      error = cg_error;
      return nullptr;
    }
    if (cg) {
      place.cgroup_procs_fds = cg->join_fds();
      place.launcher = cg->launcher();
      place.cgroup_dir_fd = cg->dir_fd();
    }
  }
  // No cgroup: the run goes under a keeper of its own, which reports on a pipe.
  int report[2] = {-1, -1};
  if (containment.mode() == ContainmentMode::subreaper && !opts.isolated && !opts.inherit_stdio) {
    if (pipe2(report, O_CLOEXEC | O_NONBLOCK) != 0) {
      error = std::string("keeper's report pipe: ") + strerror(errno);
      return nullptr;
    }
    // Only the keeper writes; it must wait for no reader.
    int blocking = 0;
    ioctl(report[1], FIONBIO, &blocking);
    place.keeper_exe_fd = keeper_executable();
    place.keeper_report_fd = report[1];
  }
  Spawned sp;
  int rc = spawn_process(opts, sp, error, place);
  if (report[1] >= 0) close(report[1]);
  if (cg) {
    cg->drop_launcher();
    cg->close_join_fds();
  }
  if (!sp.launcher_given_up.empty()) containment.count_launcher_given_up(sp.launcher_given_up);
  if (sp.child_given_up) containment.count_child_given_up(error);
  place.launcher = nullptr;
  if (rc != 0 && cg && !limits.resources.any() && error.rfind("join cgroup", 0) == 0) {
    // A cgroup the kernel would not let the child into (delegation rules):
    // this one command runs as a process group rather than not at all.
    reaper.reap();
    containment.linger(std::move(cg), 0);
    place.cgroup_procs_fds.clear();
    place.cgroup_dir_fd = -1;
    rc = spawn_process(opts, sp, error, place);
  }
  if (rc != 0) {
    if (report[0] >= 0) close(report[0]);
    reaper.reap();
    containment.linger(cg, 0);  // removed as soon as the failed child is gone
    return nullptr;
  }
  containment.count_start(sp.placement);
  auto* c = new Command(loop, reaper, containment);
  c->cgroup_ = std::move(cg);
  c->start_ms_ = uv_now(loop);
  c->sink_ = sink;
  c->limits_ = limits;
  c->pid_ = sp.leader > 0 ? sp.leader : sp.pid;
  c->is_pty_ = opts.use_pty;
  c->stdin_fd_ = sp.stdin_fd;
  c->start_ns_ = uv_hrtime();
  int fds[2] = {sp.stdout_fd, sp.stderr_fd};
  for (int i = 0; i < 2; ++i) {
    if (fds[i] < 0) continue;
    Stream s = static_cast<Stream>(i);
    c->pump_done_[i] = false;
    c->pumps_[i] = OutputPump::open(
        loop, fds[i], [c, s](const uint8_t* d, size_t n) { c->on_data(s, d, n); }, [c, s] { c->on_pump_eof(s); });
    c->pumps_[i]->set_room([c, s] { return c->sink_ ? c->sink_->output_room(s) : std::span<uint8_t>{}; });
  }
  if (sp.placement == Placement::keeper) {
    c->tree_ = std::make_shared<KeptTree>(sp.pid, c->pid_, report[0]);
    containment.keepers().add(c->tree_, [c] { c->on_keeper_gone(); });
    c->report_poll_ = new uv_poll_t;
    uv_poll_init(loop, c->report_poll_, report[0]);
    c->report_poll_->data = c;
    ++c->open_handles_;
    uv_poll_start(c->report_poll_, UV_READABLE, [](uv_poll_t* h, int, int) { static_cast<Command*>(h->data)->on_reports(); });
  } else {
    if (report[0] >= 0) close(report[0]);
    reaper.watch(c->pid_, [c](const ExitInfo& info) { c->on_exit(info); });
  }
  if (limits.timeout_ms > 0) uv_timer_start(c->timer(c->timeout_timer_), timeout_fired, static_cast<uint64_t>(limits.timeout_ms), 0);
  containment.add_freeze_listener(c);
  return c;
}

void Command::timeout_fired(uv_timer_t* t) { static_cast<Command*>(t->data)->on_timeout(); }

void Command::kill_fired(uv_timer_t* t) {
  auto* c = static_cast<Command*>(t->data);
  if (!c->leader_exited_) c->kill_everything();
}

void Command::on_freeze() {
  held_timeout_ = hold_timer(timeout_timer_);
  held_kill_ = hold_timer(kill_timer_);
}

void Command::on_thaw(uint64_t frozen_ms) {
  resume_timer(timeout_timer_, held_timeout_, timeout_fired);
  resume_timer(kill_timer_, held_kill_, kill_fired);
  held_timeout_ = held_kill_ = 0;
  // The origin of a lingering cgroup's deadline moves on too.
  start_ms_ += frozen_ms;
}

void Command::on_data(Stream s, const uint8_t* data, size_t len) {
  int i = static_cast<int>(s);
  outcome_.bytes[i] += len;
  if (sink_) sink_->on_output(s, data, len);
}

void Command::on_pump_eof(Stream s) {
  close_pump(static_cast<int>(s));
  maybe_finish();
}

void Command::close_pump(int i) {
  if (pumps_[i]) {
    if (is_pty_) stdin_fd_ = -1;  // a PTY's stdin is the master, which the pump closes
    pumps_[i]->close();
    pumps_[i] = nullptr;
  }
  pump_done_[i] = true;
}

void Command::on_exit(const ExitInfo& info) {
  leader_exited_ = true;
  int st = info.wait_status;
  if (WIFEXITED(st)) {
    outcome_.exit_code = WEXITSTATUS(st);
  } else if (WIFSIGNALED(st)) {
    outcome_.signal = WTERMSIG(st);
  }
  outcome_.user_cpu_ms = timeval_ms(info.usage.ru_utime);
  outcome_.system_cpu_ms = timeval_ms(info.usage.ru_stime);
  outcome_.max_rss_kib = info.usage.ru_maxrss;
  outcome_.duration_ms = static_cast<int64_t>((uv_hrtime() - start_ns_) / 1000000);
  // With a cgroup the timeout still bounds what the leader left behind.
  if (!cgroup_ && !tree_) stop(timeout_timer_);
  // A timed-out or interrupted command's stragglers go with it.
  if (kill_started_) {
    kill_everything();
    stop(kill_timer_);
  }
  for (int i = 0; i < 2; ++i)
    if (pumps_[i]) pumps_[i]->drain_now();
  maybe_finish();
  if (!finished_) {
    bytes_at_last_tick_ = outcome_.bytes[0] + outcome_.bytes[1];
    uv_timer_start(&drain_timer_, [](uv_timer_t* t) { static_cast<Command*>(t->data)->on_drain_tick(); },
                   kQuietMs, kQuietMs);
  }
}

void Command::on_drain_tick() {
  // The client is behind, or the processes are frozen: waiting loses nothing.
  if (paused_ || containment_.frozen()) return;
  for (int i = 0; i < 2; ++i)
    if (pumps_[i]) pumps_[i]->drain_now();
  uint64_t now = outcome_.bytes[0] + outcome_.bytes[1];
  bool quiet = now == bytes_at_last_tick_;
  bytes_at_last_tick_ = now;
  drain_active_ms_ += kQuietMs;
  if (paused_) return;
  if (quiet || drain_active_ms_ >= kDrainCapMs) {
    for (int i = 0; i < 2; ++i) close_pump(i);
  }
  maybe_finish();
}

void Command::on_reports() {
  if (!tree_) return;
  bool eof = tree_->read_reports([this](const KeeperReport& r) {
    if (r.kind != KeeperReport::leader_exited || leader_exited_) return;
    ExitInfo info;
    info.wait_status = r.wait_status;
    info.usage.ru_utime.tv_sec = r.user_us / 1000000;
    info.usage.ru_utime.tv_usec = r.user_us % 1000000;
    info.usage.ru_stime.tv_sec = r.system_us / 1000000;
    info.usage.ru_stime.tv_usec = r.system_us % 1000000;
    info.usage.ru_maxrss = r.max_rss_kib;
    on_exit(info);
  });
  // The keeper has exited: the reaper's turn (on_keeper_gone), not a busy poll.
  if (eof && report_poll_) uv_poll_stop(report_poll_);
}

void Command::on_keeper_gone() {
  on_reports();
  if (report_poll_) uv_poll_stop(report_poll_);
  if (!leader_exited_) {
    // The keeper was killed (by root) before it could say: as a SIGKILL.
    ExitInfo info;
    info.wait_status = SIGKILL;
    on_exit(info);
  }
  maybe_finish();
}

void Command::maybe_finish() {
  if (finished_ || !leader_exited_ || !pump_done_[0] || !pump_done_[1]) return;
  // Nothing of the tree runs: the keeper's exit, with the whole tree's usage,
  // is a moment away (it is on the loop's next turns).
  if (tree_ && !tree_->keeper_gone() && tree_->population() == 0) return;
  finished_ = true;
  uv_timer_stop(&drain_timer_);
  if (cgroup_) {
    // The command's own usage: vfork makes the leader's rusage start from
    // execd's peak RSS, and its CPU misses whatever was never waited for.
    CgroupUsage u = cgroup_->usage();
    if (u.known) {
      outcome_.user_cpu_ms = u.user_cpu_ms;
      outcome_.system_cpu_ms = u.system_cpu_ms;
    }
    if (u.peak_memory_bytes > 0) outcome_.max_rss_kib = u.peak_memory_bytes / 1024;
    outcome_.oom_killed = u.oom_killed;
    outcome_.pids_limit_hit = u.pids_limit_hit;
    cgroup_->let_launcher_go();
    outcome_.leftover_processes = cgroup_->population();
    stop(timeout_timer_);
  } else if (tree_) {
    // What the keeper reaped so far: all of it once it has gone (its last
    // report); with processes left, what the ones that ended used.
    const KeeperReport& u = tree_->last_usage();
    outcome_.user_cpu_ms = u.user_us / 1000;
    outcome_.system_cpu_ms = u.system_us / 1000;
    outcome_.max_rss_kib = u.max_rss_kib;
    outcome_.leftover_processes = tree_->population();
    if (outcome_.leftover_processes == 0) stop(timeout_timer_);
  } else {
    // One signal-0 probe first: the /proc scan only when the group still exists.
    outcome_.leftover_processes = kill(-pid_, 0) == 0 ? count_process_group(pid_) : 0;
  }
  // The cgroup is let go of after the sink had the outcome (the sink, or
  // release(), does it then): see CommandRunner::on_finished.
  if (sink_) sink_->on_finished(outcome_);
  let_go_of_cgroup();
}

void Command::let_go_of_cgroup() {
  if (tree_ && !tree_let_go_) {
    tree_let_go_ = true;
    uint64_t deadline = limits_.timeout_ms > 0 ? start_ms_ + static_cast<uint64_t>(limits_.timeout_ms) : 0;
    containment_.keepers().linger(tree_, deadline);
  }
  if (!cgroup_ || cgroup_let_go_) return;
  cgroup_let_go_ = true;
  uint64_t deadline = limits_.timeout_ms > 0 ? start_ms_ + static_cast<uint64_t>(limits_.timeout_ms) : 0;
  containment_.release(cgroup_, finished_ && outcome_.leftover_processes == 0, deadline);
}

void Command::kill_everything() {
  if (cgroup_) cgroup_->kill_all();
  if (tree_) tree_->kill_all();
  kill(-pid_, SIGKILL);
}

void Command::on_timeout() {
  if (leader_exited_) {
    // The shell is gone, its descendants are not: the timeout is theirs too.
    if (cgroup_) cgroup_->kill_all();
    if (tree_) tree_->kill_all();
    return;
  }
  start_kill(true);
}

void Command::interrupt() {
  if (leader_exited_ || kill_started_) return;
  start_kill(false);
}

void Command::start_kill(bool timed_out) {
  kill_started_ = true;
  (timed_out ? outcome_.timed_out : outcome_.interrupted) = true;
  kill(-pid_, SIGTERM);
  if (cgroup_) cgroup_->signal_all(SIGTERM);
  if (tree_) tree_->signal_all(SIGTERM);
  // A stopped job ignores TERM until continued.
  kill(-pid_, SIGCONT);
  if (cgroup_) cgroup_->signal_all(SIGCONT);
  if (tree_) tree_->signal_all(SIGCONT);
  uv_timer_start(timer(kill_timer_), kill_fired,
                 static_cast<uint64_t>(limits_.kill_grace_ms > 0 ? limits_.kill_grace_ms : 1), 0);
}

void Command::signal_group(int sig) {
  if (sig == SIGKILL && cgroup_) cgroup_->kill_all();
  if (sig == SIGKILL && tree_) tree_->kill_all();
  if (!leader_exited_) kill(-pid_, sig);
}

void Command::signal_leader(int sig) {
  if (!leader_exited_) kill(pid_, sig);
}

void Command::signal_everything(int sig) {
  if (cgroup_) {
    if (sig == SIGKILL) cgroup_->kill_all();
    else cgroup_->signal_all(sig);
  }
  if (tree_) {
    if (sig == SIGKILL) tree_->kill_all();
    else tree_->signal_all(sig);
  }
  if (!leader_exited_) kill(-pid_, sig);
}

void Command::resize(unsigned short rows, unsigned short cols) {
  if (!is_pty_ || !pumps_[0]) return;
  struct winsize ws {};
  ws.ws_row = rows;
  ws.ws_col = cols;
  ioctl(stdin_fd_, TIOCSWINSZ, &ws);
}

void Command::drain_output() {
  for (int i = 0; i < 2; ++i)
    if (pumps_[i] && !paused_) pumps_[i]->drain_now();
}

void Command::set_paused(bool paused) {
  if (paused_ == paused) return;
  paused_ = paused;
  for (auto* p : pumps_) {
    if (!p) continue;
    if (paused) p->pause(); else p->resume();
  }
}

int Command::take_stdin() {
  if (stdin_fd_ < 0) return -1;
  if (is_pty_) return fcntl(stdin_fd_, F_DUPFD_CLOEXEC, 3);
  int fd = stdin_fd_;
  stdin_fd_ = -1;
  return fd;
}

void Command::release() {
  if (released_) return;
  released_ = true;
  sink_ = nullptr;
  containment_.remove_freeze_listener(this);
  let_go_of_cgroup();
  if (!leader_exited_ && !tree_) reaper_.unwatch(pid_);
  if (report_poll_) {
    uv_close(reinterpret_cast<uv_handle_t*>(report_poll_), [](uv_handle_t* h) {
      auto* c = static_cast<Command*>(h->data);
      delete reinterpret_cast<uv_poll_t*>(h);
      if (--c->open_handles_ == 0) delete c;
    });
    report_poll_ = nullptr;
  }
  if (stdin_fd_ >= 0 && !is_pty_) close(stdin_fd_);
  stdin_fd_ = -1;
  for (int i = 0; i < 2; ++i) close_pump(i);
  for (uv_timer_t* t : {timeout_timer_, kill_timer_, &drain_timer_}) {
    if (!t) continue;
    uv_close(reinterpret_cast<uv_handle_t*>(t), [](uv_handle_t* h) {
      auto* c = static_cast<Command*>(h->data);
      if (h != reinterpret_cast<uv_handle_t*>(&c->drain_timer_)) delete reinterpret_cast<uv_timer_t*>(h);
      if (--c->open_handles_ == 0) delete c;
    });
  }
}

}  // namespace execd::pty
