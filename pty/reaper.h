// pty/reaper: the one place that calls wait4(). execd is a child subreaper, so
// orphaned grandchildren are re-parented to it and reaped here too; the exit
// of a process someone is watching is delivered to that watcher with its
// resource usage. Nothing else in execd may reap children.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>
#include <uv.h>

#include <functional>
#include <unordered_map>

namespace execd::pty {

struct ExitInfo {
  int wait_status = 0;  // as from wait4
  struct rusage usage {};
};

class Reaper {
 public:
  using Callback = std::function<void(const ExitInfo&)>;

  explicit Reaper(uv_loop_t* loop);
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;

  // Becomes a subreaper and starts handling SIGCHLD.
  void start();
  void stop();
  void watch(pid_t pid, Callback cb);
  void unwatch(pid_t pid) { watchers_.erase(pid); }
  // Reaps everything that has exited (also called after each spawn failure).
  void reap();
  size_t orphans_reaped() const { return orphans_reaped_; }

 private:
  static void on_sigchld(uv_signal_t* handle, int signum);

  uv_signal_t signal_;
  std::unordered_map<pid_t, Callback> watchers_;
  size_t orphans_reaped_ = 0;
  bool started_ = false;
};

}  // namespace execd::pty
