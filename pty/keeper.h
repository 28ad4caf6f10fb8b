// pty/keeper: containment without cgroups. Each run gets a keeper, a small
// process between execd and the command (the small static `execd-keeper`
// embedded in execd, or execd's own binary as `execd --keeper`), which is a child subreaper: whatever the command starts
// (setsid children, double forks, daemons) is re-parented to the keeper
// when its parent dies, never to execd. So the kernel keeps the run's tree
// under one process, which execd can reach after the shell has exited:
//   - the keeper reaps the whole tree and reports, over a pipe, the
//     command's exit status and the tree's usage (RUSAGE_CHILDREN: CPU is
//     the sum over every reaped descendant, max RSS the largest one's);
//   - on execd's request (SIGUSR1 with the signal as its value, sigqueue)
//     it sends a signal to every process of the tree, found by walking
//     /proc/PID/task/TID/children from itself down; SIGKILL is repeated in
//     rounds until the tree is empty (a fork bomb forks between rounds);
//   - it dies with execd (PR_SET_PDEATHSIG), and kills its tree first;
//   - it stays root and not dumpable: a command of another uid can neither
//     signal nor trace it.
// It exits once its tree is empty. The command's pid (the leader) is the
// keeper's first child, started before the keeper's exec (pty/spawn).
#pragma once

#include <sys/resource.h>
#include <sys/types.h>
#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>

#include "pty/keeper_process.h"

namespace execd::pty {

class Reaper;

// What the keeper's exec runs, opened once: the embedded static keeper in a
// sealed memfd, else execd's own binary (O_PATH; the kernel refuses exec
// from a memfd under vm.memfd_noexec=2); -1 if neither can be had (then
// there are no keepers: process-group containment).
int keeper_executable();
// Whether keeper_executable() is the embedded static keeper.
bool keeper_is_embedded();

// Counts the live (not zombie) descendants of `root`, found through
// /proc/PID/task/TID/children; -1 if `root`'s own list cannot be read.
int count_descendants(pid_t root);

// One run's tree, as execd sees it: the keeper (execd's child) and the
// command's leader (the keeper's first child). Shared by the command and
// whoever may still reach the run after the command let go (the runner,
// Keepers until the keeper has exited).
class KeptTree {
 public:
  KeptTree(pid_t keeper, pid_t leader, int report_fd) : keeper_(keeper), leader_(leader), report_fd_(report_fd) {}
  ~KeptTree();
  KeptTree(const KeptTree&) = delete;
  KeptTree& operator=(const KeptTree&) = delete;

  pid_t keeper() const { return keeper_; }
  pid_t leader() const { return leader_; }
  int report_fd() const { return report_fd_; }
  bool keeper_gone() const { return gone_; }
  // Live processes of the run (the keeper not counted); 0 once it is gone.
  int population() const;
  // SIGKILL to the whole tree (the keeper repeats it until it is empty).
  int kill_all();
  // `sig` to every process of the tree.
  void signal_all(int sig);
  // Whether a signal was ever sent (a DELETE, a timeout).
  bool signalled() const { return signalled_; }

  // Reads whatever records the pipe holds (non-blocking); calls `on_record`.
  // True at the end of the pipe (the keeper has exited).
  bool read_reports(const std::function<void(const KeeperReport&)>& on_record);
  // The last usage the keeper reported (all zero before any record).
  const KeeperReport& last_usage() const { return last_; }
  bool final_usage() const { return final_; }

 private:
  friend class Keepers;
  pid_t keeper_, leader_;
  int report_fd_;
  bool gone_ = false, signalled_ = false, final_ = false;
  KeeperReport last_;
  uint64_t deadline_ms_ = 0;  // uv_now time it is killed at (0: none)
  std::function<void()> on_gone_;
};

// Every keeper that is alive, from its start until the reaper has it:
// kills a lingering tree at its deadline (a command's timeout outlives
// its shell), kills all of them at shutdown.
class Keepers {
 public:
  Keepers() = default;
  Keepers(const Keepers&) = delete;
  Keepers& operator=(const Keepers&) = delete;
  void init(uv_loop_t* loop, Reaper* reaper);
  // Tracks a new keeper; `on_gone` runs when the reaper has it (after its
  // last records were read).
  void add(const std::shared_ptr<KeptTree>& t, std::function<void()> on_gone);
  // The command let go of it: killed at `deadline_ms` (uv_now; 0 = never).
  void linger(const std::shared_ptr<KeptTree>& t, uint64_t deadline_ms);
  // Trees of finished commands whose processes still run.
  size_t lingering_with_members() const;
  void kill_everything();
  void close();

 private:
  void on_tick();
  uv_loop_t* loop_ = nullptr;
  Reaper* reaper_ = nullptr;
  uv_timer_t timer_{};
  bool timer_open_ = false;
  std::unordered_map<pid_t, std::shared_ptr<KeptTree>> live_;
};

}  // namespace execd::pty
