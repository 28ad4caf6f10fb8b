// pty/reaper: see header.
#include "pty/reaper.h"

#include <sys/prctl.h>
#include <sys/wait.h>

#include <cerrno>

namespace execd::pty {

Reaper::Reaper(uv_loop_t* loop) {
  uv_signal_init(loop, &signal_);
  signal_.data = this;
}

void Reaper::start() {
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  uv_signal_start(&signal_, on_sigchld, SIGCHLD);
  started_ = true;
  reap();  // anything that exited before the handler was installed
}

void Reaper::stop() {
  if (!started_) return;
  uv_signal_stop(&signal_);
  uv_close(reinterpret_cast<uv_handle_t*>(&signal_), nullptr);
  started_ = false;
}

void Reaper::watch(pid_t pid, Callback cb) { watchers_[pid] = std::move(cb); }

void Reaper::on_sigchld(uv_signal_t* handle, int) { static_cast<Reaper*>(handle->data)->reap(); }

void Reaper::reap() {
  while (true) {
    ExitInfo info;
    pid_t pid = wait4(-1, &info.wait_status, WNOHANG, &info.usage);
    if (pid == 0) return;
    if (pid < 0) {
      if (errno == EINTR) continue;
      return;  // ECHILD: no children left
    }
    auto it = watchers_.find(pid);
    if (it == watchers_.end()) {
      ++orphans_reaped_;
      continue;
    }
    Callback cb = std::move(it->second);
    watchers_.erase(it);
    cb(info);
  }
}

}  // namespace execd::pty
