// pty/bash_session: one long-lived, non-interactive bash per /session, so
// everything a shell remembers persists between runs (unexported variables,
// functions, aliases, cwd, `set -o` options, `unset`, traps, jobs).
//
// How a run works, with no marker that user output could collide with:
//  * the shell's stdin is a private command channel; its stdout/stderr are two
//    pipes pumped by a Command; fd 3 is a status pipe that only the trailer
//    writes to;
//  * a run writes the user command to a 0600 temp file and sends the shell
//        { \builtin cd -- 'CWD' && \builtin source 'FILE'; } </dev/null 3>&-
//        \builtin printf '%d\n' "$?" >&3
//    so the user's code (and everything it starts) reads /dev/null, cannot see
//    fd 3, and runs in the shell itself;
//  * the status line on fd 3 ends the run: every byte written before it is
//    already in the pipes, so they are drained without blocking (honouring
//    backpressure) and the run finishes with that status.
// A shell that dies during a run (`exit 3`) ends the run with its exit status
// and the session is dead from then on.
//
// Timeout: the shell traps SIGUSR1 with `return` plus a DEBUG trap (with
// `set -T`) that keeps returning, which unwinds every function and the
// sourced file without running another user command; on expiry execd sends
// SIGUSR1 and SIGKILLs every process of the shell's session that did not
// exist when the run started (so background jobs of earlier runs survive),
// found by a /proc scan on the threadpool, repeating every 50 ms (each
// `return` pops one function level). If the run has not reported after the
// grace period the shell itself is killed and the session dies.
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "pty/command.h"
#include "pty/runtime.h"
#include "pty/pump.h"
#include "pty/reaper.h"

namespace execd::pty {

struct RunOutcome {
  std::optional<int> exit_code;  // empty when a signal ended it
  int signal = 0;
  bool timed_out = false;
  bool interrupted = false;   // stopped by interrupt(), not by its timeout
  bool shell_exited = false;  // the run ended the shell (or it was killed)
  int64_t duration_ms = 0;
};

class BashListener {
 public:
  virtual ~BashListener() = default;
  virtual void on_run_output(Stream s, const uint8_t* data, size_t len) = 0;
  // Last call for the run; the listener is forgotten afterwards.
  virtual void on_run_finished(const RunOutcome& outcome) = 0;
};

class BashSession : public CommandSink, public FreezeListener {
 public:
  static constexpr int64_t kTimeoutGraceMs = 2000;

  // `scratch_dir` holds the per-run temp files.
  BashSession(Runtime& rt, std::string scratch_dir, std::string name);

  bool start(const std::string& shell, const std::vector<std::string>& env, const std::string& cwd,
             std::string& error);
  // Before start(): the shell runs inside an isolated session (its
  // namespaces, as that uid/gid in setpriv mode), where the scratch
  // directory is seen at `scratch_inside`.
  void isolate(const IsolatedEntry* entry, std::optional<uid_t> uid, std::optional<gid_t> gid,
               std::string scratch_inside) {
    isolated_ = entry;
    uid_ = uid;
    gid_ = gid;
    scratch_inside_ = std::move(scratch_inside);
  }
  bool alive() const { return cmd_ && !shell_exited_; }
  bool busy() const { return run_active_; }

  enum class RunStatus { started, busy, dead, failed };

  // What a run needs from the file system and /proc, made ready off the loop
  // (prepare_run blocks: it writes the run's script file and, with a
  // timeout, lists the session's processes so that the timeout spares them).
  struct PreparedRun {
    std::string file;              // the script; empty when preparation failed
    std::string error;
    std::vector<pid_t> preexisting;
  };
  // On the loop: where the next run's script goes, and the shell's pid.
  std::string next_run_file();
  pid_t shell_pid() const { return pid_; }
  // Blocking and touching no session: call it on the threadpool with what
  // the two calls above returned, then run() on the loop.
  // `owner`: who the script file belongs to (a shell running as another uid must read it).
  static PreparedRun prepare_run(std::string file, pid_t shell_pid, const std::string& command, int64_t timeout_ms,
                                 std::optional<std::pair<uid_t, gid_t>> owner = std::nullopt);
  RunStatus run(PreparedRun prepared, const std::string& cwd, int64_t timeout_ms, BashListener* listener,
                std::string& error);
  // Drops a prepared run that will not be started.
  static void discard(const PreparedRun& prepared);
  // The client left: the run continues, its output is dropped.
  void detach_listener();
  // Stops the current run the way its timeout would; the shell survives.
  // False if no run is active.
  bool interrupt();
  void set_paused(bool paused);
  // SIGKILL to every process of the shell's session, the shell included.
  void kill_all();
  // Called once when the shell is gone and no run is pending.
  void set_on_gone(std::function<void()> fn) { on_gone_ = std::move(fn); }
  // Releases everything; the object frees itself once its handles are closed.
  // A run still on ends (its listener hears on_run_finished, killed).
  void destroy();

  // CommandSink
  void on_output(Stream s, const uint8_t* data, size_t len) override;
  void on_finished(const Outcome& outcome) override;
  // FreezeListener: a run's timeout stands still while frozen.
  void on_freeze() override;
  void on_thaw(uint64_t frozen_ms) override;

 private:
  ~BashSession() override = default;
  void on_status_data(const uint8_t* data, size_t len);
  void on_status_eof();
  void try_complete();
  void complete(RunOutcome outcome);
  void on_timer();
  static void timer_fired(uv_timer_t* t);
  void start_kill_scan();
  void kill_scan_done();
  void stop_timer();
  void cleanup_run_file();
  // Lets go of the shell's process handle and its status pipe.
  void release_shell();

  Runtime& rt_;
  uv_loop_t* loop_;
  std::string scratch_dir_, name_;
  const IsolatedEntry* isolated_ = nullptr;
  std::optional<uid_t> uid_;
  std::optional<gid_t> gid_;
  std::string scratch_inside_;
  Command* cmd_ = nullptr;
  OutputPump* status_ = nullptr;
  uv_timer_t timer_;
  bool timer_running_ = false, destroyed_ = false, timer_closed_ = false;
  uint64_t held_timer_ = 0;  // what the run's timer had left when frozen
  int scans_in_flight_ = 0;  // /proc kill scans on the threadpool (see on_timer)
  pid_t pid_ = -1;
  bool shell_exited_ = false, gone_reported_ = false;
  std::optional<Outcome> shell_outcome_;
  std::function<void()> on_gone_;
  uint64_t run_counter_ = 0;

  // The current run.
  // timed_out_: the run is being stopped (by its timeout or interrupt()).
  bool run_active_ = false, status_seen_ = false, timed_out_ = false, interrupted_ = false;
  int status_code_ = 0;
  std::string status_buf_, run_file_;
  BashListener* listener_ = nullptr;
  uint64_t run_start_ns_ = 0, kill_start_ns_ = 0;
  std::set<pid_t> preexisting_;
};

}  // namespace execd::pty
