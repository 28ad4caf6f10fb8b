// pty/command: one running process and everything execd does to it: output
// pumps (pipes or a PTY), the timeout, interrupt (TERM to the process group,
// grace, then KILL to the whole cgroup, or the process group without one),
// reaping through the Reaper, its cgroup (pty/cgroup: usage, limits,
// leftovers). Output goes to exactly one sink, which also proves what it
// was (execd/exec hashes it once, as it takes it).
//
// With a cgroup, the timeout bounds the whole cgroup: what is left of the
// command when it fires is killed even after the leader has exited and the
// command has been reported finished (the cgroup then lingers, see
// Containment::linger). Without a timeout, leftovers keep running in the
// cgroup, where interrupt() and execd's shutdown still reach them.
//
// The stream ends when the leader has exited and its pipes are at EOF. A
// grandchild that keeps a pipe open cannot hold it forever: once the leader
// is gone, a pipe that stays quiet for kQuietMs, or keeps talking for
// kDrainCapMs of un-paused time, is closed.
//
// While execd's cgroups are frozen (POST /freeze) the timeout and the kill
// grace stand still, and so does the drain of a finished leader's pipes.
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "pty/cgroup.h"
#include "pty/keeper.h"
#include "pty/pump.h"
#include "pty/reaper.h"
#include "pty/runtime.h"
#include "pty/spawn.h"

namespace execd::pty {

enum class Stream : uint8_t { out = 0, err = 1 };

struct Outcome {
  std::optional<int> exit_code;  // empty if killed by a signal
  int signal = 0;
  bool timed_out = false;
  bool interrupted = false;
  int64_t duration_ms = 0;
  uint64_t bytes[2] = {0, 0};
  int64_t user_cpu_ms = 0, system_cpu_ms = 0, max_rss_kib = 0;
  // Processes of the command still alive when its stream ended (-1: unknown).
  int leftover_processes = 0;
  bool oom_killed = false, pids_limit_hit = false;
};

class CommandSink {
 public:
  virtual ~CommandSink() = default;
  virtual void on_output(Stream s, const uint8_t* data, size_t len) = 0;
  // Where the next output of `s` may be read into (OutputPump::set_room).
  virtual std::span<uint8_t> output_room(Stream s) { return {}; }
  virtual void on_finished(const Outcome& outcome) = 0;
};

struct CommandLimits {
  int64_t timeout_ms = 0;      // 0 = none
  int64_t kill_grace_ms = 2000;  // TERM → KILL
  ResourceLimits resources;      // applied through the command's cgroup
};

// oom_score_adj of every process execd starts (execd's own is kDaemonOomScoreAdj).
constexpr int kChildOomScoreAdj = 500;
constexpr int kDaemonOomScoreAdj = -900;

class Command final : public FreezeListener {
 public:
  static constexpr int64_t kQuietMs = 50;
  static constexpr int64_t kDrainCapMs = 2000;

  // Spawns; on failure returns nullptr with `error` set.
  static Command* start(Runtime& rt, const SpawnOptions& opts, CommandLimits limits, CommandSink* sink,
                        std::string& error);

  pid_t pid() const { return pid_; }
  bool running() const { return !leader_exited_; }
  bool finished() const { return finished_; }
  bool is_pty() const { return is_pty_; }
  int stdin_fd() const { return stdin_fd_; }
  // Hands the stdin pipe's write end to the caller (who closes it for EOF);
  // a PTY's master is duplicated instead. -1 if there is none.
  int take_stdin();

  // Backpressure from the sink: stop/start reading the process's output.
  void set_paused(bool paused);
  bool paused() const { return paused_; }
  // TERM to the process group now, KILL to everything after the grace period.
  void interrupt();
  // The command's cgroup (null in process-group mode); it outlives the
  // command while members remain.
  const std::shared_ptr<CommandCgroup>& cgroup() const { return cgroup_; }
  // Without cgroups: the run's tree under its keeper (pty/keeper); null
  // with a cgroup or in process-group mode. It too outlives the command
  // while processes of it remain.
  const std::shared_ptr<KeptTree>& tree() const { return tree_; }
  void signal_group(int sig);
  // `sig` to the leader alone (while it has not exited): what it started
  // is not reached, as envd's SendSignal without `descendants`.
  void signal_leader(int sig);
  // `sig` to everything of the command: its cgroup (SIGKILL: kill_all, so
  // setsid() children are caught too) and its process group.
  void signal_everything(int sig);
  void resize(unsigned short rows, unsigned short cols);
  // Reads whatever the output fds hold right now (unless paused), delivering
  // it to the sink before returning.
  void drain_output();

  // Detaches the sink and frees the command once its handles are closed. A
  // still-running process is left alone (and reaped later as an orphan).
  void release();

  // FreezeListener: the timeout and the kill grace stop while frozen.
  void on_freeze() override;
  void on_thaw(uint64_t frozen_ms) override;

 private:
  Command(uv_loop_t* loop, Reaper& reaper, Containment& containment);
  ~Command() override = default;
  static void timeout_fired(uv_timer_t* t);
  static void kill_fired(uv_timer_t* t);
  void on_exit(const ExitInfo& info);
  void on_data(Stream s, const uint8_t* data, size_t len);
  void on_pump_eof(Stream s);
  void on_timeout();
  void on_drain_tick();
  void maybe_finish();
  void start_kill(bool timed_out);
  void close_pump(int i);
  void kill_everything();
  void let_go_of_cgroup();
  void on_reports();
  void on_keeper_gone();

  uv_loop_t* loop_;
  Reaper& reaper_;
  Containment& containment_;
  CommandSink* sink_ = nullptr;
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  bool is_pty_ = false;
  OutputPump* pumps_[2] = {nullptr, nullptr};
  bool pump_done_[2] = {true, true};
  // The drain timer is always there (its close is what frees the command);
  // the timeout and kill timers exist only once used, since most commands
  // have no timeout and are never killed (2 x 152 bytes each otherwise).
  uv_timer_t drain_timer_;
  uv_timer_t* timeout_timer_ = nullptr;
  uv_timer_t* kill_timer_ = nullptr;
  uv_timer_t* timer(uv_timer_t*& slot);
  static void stop(uv_timer_t* t) {
    if (t) uv_timer_stop(t);
  }
  int open_handles_ = 0;
  bool leader_exited_ = false, finished_ = false, paused_ = false, released_ = false;
  bool kill_started_ = false;
  bool cgroup_let_go_ = false;
  uint64_t start_ms_ = 0;  // uv_now at start: the timeout's origin for a lingering cgroup
  uint64_t start_ns_ = 0;
  uint64_t bytes_at_last_tick_ = 0;
  int64_t drain_active_ms_ = 0;
  CommandLimits limits_;
  uint64_t held_timeout_ = 0, held_kill_ = 0;  // what the timers had left when frozen
  Outcome outcome_;
  std::shared_ptr<CommandCgroup> cgroup_;
  std::shared_ptr<KeptTree> tree_;
  uv_poll_t* report_poll_ = nullptr;  // the keeper's report pipe
  bool tree_let_go_ = false;
};

const char* signal_name(int sig);
// "killed", "terminated", ...: how Go's os/exec words a signal death.
std::string signal_description(int sig);
int signal_from_name(const std::string& name);

}  // namespace execd::pty
