// execd/entrypoint: the command execd runs as a container's init
// (`execd --init -- CMD ARGS...`, or EXECD_INIT=1 through bootstrap.sh):
// started with execd's own stdin/stdout/stderr (the container's log) in its
// own process group, sent the signals a container's init receives, and
// watched through the one reaper; its exit status becomes execd's. A
// restart (POST /init with entrypointPolicy "restart") stops it and starts
// it again with the bound environment, without that exit counting.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "pty/runtime.h"

namespace execd {

class Entrypoint {
 public:
  // Called once, with an exit code (128 + signal number if a signal ended it).
  using Exited = std::function<void(int status)>;

  Entrypoint(pty::Runtime& runtime, std::vector<std::string> argv, Exited on_exit);
  Entrypoint(const Entrypoint&) = delete;
  Entrypoint& operator=(const Entrypoint&) = delete;

  // False with `error` if it could not start (execd then exits 127 or 126).
  bool start(const std::vector<std::string>& env, std::string& error);
  // To its whole process group (a shell entrypoint's children get it too).
  void forward(int signum) const;
  // SIGTERM now; when it has exited, starts again with `env`.
  void restart(std::vector<std::string> env);
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

 private:
  void exited(int wait_status);

  pty::Runtime& runtime_;
  std::vector<std::string> argv_;
  Exited on_exit_;
  pid_t pid_ = -1;
  bool restarting_ = false;
  std::vector<std::string> restart_env_;
};

// The status a shell reports for a wait status: the exit code, or 128 + the
// signal number.
int shell_status(int wait_status);

}  // namespace execd
