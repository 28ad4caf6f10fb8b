// execd/entrypoint: see header.
#include "execd/entrypoint.h"

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <spdlog/spdlog.h>

#include "execd/runners/command_spawn.h"

namespace execd {

int shell_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

Entrypoint::Entrypoint(pty::Runtime& runtime, std::vector<std::string> argv, Exited on_exit)
    : runtime_(runtime), argv_(std::move(argv)), on_exit_(std::move(on_exit)) {}

bool Entrypoint::start(const std::vector<std::string>& env, std::string& error) {
  pty::SpawnOptions opts;
  runners::set_argv_program(argv_, env, opts);
  opts.env = env;
  opts.inherit_stdio = true;
  pty::ChildPlacement place;
  place.setup = &runtime_.children;
  pty::Spawned spawned;
  int rc = pty::spawn_process(opts, spawned, error, place);
  if (rc != 0) {
    runtime_.reaper.reap();
    return false;
  }
  pid_ = spawned.pid;
  runtime_.reaper.watch(pid_, [this](const pty::ExitInfo& info) { exited(info.wait_status); });
  spdlog::info("entrypoint started: pid {} ({})", pid_, argv_.front());
  return true;
}

void Entrypoint::forward(int signum) const {
  if (pid_ > 0) kill(-pid_, signum);
}

void Entrypoint::restart(std::vector<std::string> env) {
  restart_env_ = std::move(env);
  if (pid_ <= 0) {
    std::string error;
    if (!start(restart_env_, error)) {
      spdlog::error("entrypoint restart failed: {}", error);
      on_exit_(127);
    }
    return;
  }
  restarting_ = true;
  forward(SIGTERM);
  forward(SIGCONT);
}

void Entrypoint::exited(int wait_status) {
  int status = shell_status(wait_status);
  spdlog::info("entrypoint pid {} exited: status {}", pid_, status);
  pid_ = -1;
  if (restarting_) {
    restarting_ = false;
    std::string error;
    if (start(restart_env_, error)) return;
    spdlog::error("entrypoint restart failed: {}", error);
    status = 127;
  }
  on_exit_(status);
}

}  // namespace execd
