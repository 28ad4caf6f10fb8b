// execd/runners/command: the runner of POST /command: one process (bash -c,
// or the argv given) through pty::Command, with its pipes or terminal, its
// cgroup, its timeout and its stdin. After the shell exits, the runner keeps
// its cgroup (weakly: the containment owns it) so that DELETE still reaches
// what the command left running and the status can count it.
#pragma once

#include <memory>
#include <string>

#include "execd/exec/execution.h"
#include "pty/command.h"
#include "pty/fd_writer.h"
#include "pty/runtime.h"

namespace execd::runners {

class CommandRunner final : public exec::Runner, private pty::CommandSink {
 public:
  // Spawns; null with `error` set when it cannot. `keep_stdin`: the
  // process's stdin stays open for POST /command/{id}/stdin.
  static std::unique_ptr<CommandRunner> start(pty::Runtime& rt, const pty::SpawnOptions& opts,
                                              const pty::CommandLimits& limits, bool keep_stdin, exec::RunSink& sink,
                                              std::string& error);
  ~CommandRunner() override;

  // exec::Runner
  bool pausable() const override { return true; }
  void set_paused(bool paused) override;
  bool interrupt() override;
  void signal(int sig) override;
  void describe(nlohmann::ordered_json& status) const override;
  bool holds_nothing() const override;
  bool counts_processes() const override { return contained_; }
  bool has_stdin() const override { return stdin_ != nullptr; }
  void stdin_write(const char* data, size_t len) override;
  size_t stdin_queued() const override { return stdin_ ? stdin_->queued() : 0; }
  void stdin_close() override;
  int64_t pgid() const override { return pid_; }
  bool send_signal(int sig, exec::SignalScope scope) override;
  void resize(uint16_t rows, uint16_t cols) override;

 private:
  explicit CommandRunner(exec::RunSink& sink) : sink_(sink) {}
  // pty::CommandSink
  void on_output(pty::Stream s, const uint8_t* data, size_t len) override;
  std::span<uint8_t> output_room(pty::Stream s) override;
  void on_finished(const pty::Outcome& outcome) override;
  void close_stdin_now();

  exec::RunSink& sink_;
  pty::Command* cmd_ = nullptr;  // released when the command finishes
  int64_t pid_ = 0;
  bool tty_ = false;
  // The command's cgroup while it exists; not owned (a retained execution
  // holding it kept two heap pieces per command after a burst).
  std::weak_ptr<pty::CommandCgroup> cgroup_;
  // Without cgroups: its tree under its keeper, while the keeper lives.
  std::weak_ptr<pty::KeptTree> tree_;
  bool contained_ = false;  // it ran in a cgroup or under a keeper (false in process-group mode)
  // What is left of it after its shell (its cgroup's or tree's members; 0
  // when neither is there any more; -1 unknown).
  int left_behind() const;
  // SIGKILL (sig 9) or `sig` to all of what is left; false if nothing is.
  bool signal_left_behind(int sig);
  pty::FdWriter* stdin_ = nullptr;
  bool stdin_eof_ = false;  // EOF asked for: close once drained
};

}  // namespace execd::runners
