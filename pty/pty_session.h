// pty/pty_session: the process side of one OpenSandbox PTY session: a shell
// (or a given command) on a PTY or on three pipes, its bounded replay ring
// with absolute offsets, queued non-blocking stdin, resize, signals to the
// terminal's foreground process group, and killing every process the session
// started. It knows nothing about WebSockets: at most one listener hears the
// output (after the ring has it) and the exit, and may pause the output pump
// (backpressure). Also owns the /proc helpers that find a session's processes.
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pty/command.h"
#include "pty/fd_writer.h"
#include "pty/runtime.h"
#include "pty/reaper.h"
#include "pty/replay_ring.h"
#include "pty/spawn.h"

namespace execd::pty {

// Pids of every process whose session id or process group id is `sid`
// (excluding execd itself), from /proc.
std::vector<pid_t> session_processes(pid_t sid);
// Sends `sig` to every such process, repeating the scan until no new process
// shows up (a few passes), so children forked during the kill go too.
void kill_session(pid_t sid, int sig);


class PtyListener {
 public:
  virtual ~PtyListener() = default;
  // Called after the bytes are in the ring; the ring's end offset already
  // counts them.
  virtual void on_pty_output(Stream s, const uint8_t* data, size_t len) = 0;
  // Every byte of output has been delivered before this.
  virtual void on_pty_exit(int exit_code) = 0;
};

class PtySession : public CommandSink {
 public:
  PtySession(Runtime& rt, size_t ring_bytes);
  ~PtySession() override;
  PtySession(const PtySession&) = delete;
  PtySession& operator=(const PtySession&) = delete;

  // Starts the process (`opts.use_pty` decides the mode). Returns false with
  // `error` set on failure.
  bool start(const SpawnOptions& opts, std::string& error);
  bool started() const { return started_; }
  bool running() const { return cmd_ && !exited_; }
  bool exited() const { return exited_; }
  int exit_code() const { return exit_code_; }
  bool pty_mode() const { return pty_mode_; }
  pid_t pid() const { return pid_; }
  const ReplayRing& ring() const { return ring_; }

  void set_listener(PtyListener* l) { listener_ = l; }
  // Backpressure from the listener; ignored when no listener is attached.
  void set_paused(bool paused);

  // Queues bytes for the process's stdin. Returns false if stdin is gone.
  bool write_stdin(const char* data, size_t len);
  size_t stdin_queued() const;
  // Called whenever the stdin queue becomes empty again.
  void set_on_stdin_drained(std::function<void()> fn) { on_stdin_drained_ = std::move(fn); }

  void resize(unsigned short rows, unsigned short cols);
  // PTY mode: the terminal's foreground process group (tcgetpgrp on the
  // master), falling back to the shell's group; pipe mode: the shell's group.
  void send_signal(int sig);
  // SIGKILL to every process of the session (session id or group = shell pid).
  void kill_all();

  // CommandSink
  void on_output(Stream s, const uint8_t* data, size_t len) override;
  void on_finished(const Outcome& outcome) override;

 private:
  void close_stdin();

  Runtime& rt_;
  uv_loop_t* loop_;
  ReplayRing ring_;
  Command* cmd_ = nullptr;
  FdWriter* stdin_ = nullptr;
  int master_dup_ = -1;  // PTY mode: our own handle on the master for tcgetpgrp/resize
  PtyListener* listener_ = nullptr;
  std::function<void()> on_stdin_drained_;
  pid_t pid_ = -1;
  bool started_ = false, exited_ = false, pty_mode_ = true;
  int exit_code_ = 0;
};

}  // namespace execd::pty
