// pty/cgroup: containment of everything a command starts. Each command, bash
// session and PTY session gets its own cgroup under execd's own one
// (.../execd-<pid>/cmd-<n>), which the child joins between vfork and exec by
// writing "0" into cgroup.procs fds opened before the vfork. Killing a
// command then means killing its cgroup (v2: cgroup.kill; v1: freeze, SIGKILL
// every member, thaw), so setsid() and double-forked children cannot slip
// out; its resource usage is the cgroup's, not execd's; optional limits
// (memory, pids, cpu shares) are the cgroup's too.
//
// Three modes, chosen once at start: cgroup-v2 (a pure unified hierarchy),
// cgroup-v1 (per-controller hierarchies: pids, memory, freezer, cpu, cpuacct;
// whichever are mounted and writable), or process-group (no usable cgroups,
// or --no-cgroups: the old behaviour, signals to the command's process group).
//
// A command whose leader exited while members remain "lingers": the
// containment keeps its cgroup, kills it when the command's timeout (counted
// from its start) expires, and removes the directory once it is empty. On
// shutdown every cgroup is killed and removed.
//
// A cgroup is made ahead on the threadpool and, when its command ends with
// nothing left in it, used again: a mkdir and an rmdir in three hierarchies
// (and the kernel's teardown of a memory cgroup) cost more than the rest of
// the containment. See Containment::release for what makes one reusable.
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>
#include "pty/keeper.h"

namespace execd::pty {

// subreaper: no cgroups, each run under a keeper of its own (pty/keeper);
// process_group: not even that (execd's binary cannot be exec'd again).
enum class ContainmentMode { cgroup_v2, cgroup_v1, subreaper, process_group };
const char* containment_mode_name(ContainmentMode m);  // "cgroup-v2", "cgroup-v1", "subreaper", "process-group"

struct ResourceLimits {
  int64_t memory_bytes = 0;  // 0 = none
  int64_t pids = 0;          // 0 = none
  int64_t cpu_shares = 0;    // 0 = default (v1 cpu.shares, 2..262144; v2 mapped to cpu.weight)
  bool any() const { return memory_bytes > 0 || pids > 0 || cpu_shares > 0; }
};

struct CgroupUsage {
  bool known = false;  // false: the counters below could not be read
  int64_t peak_memory_bytes = 0;
  int64_t user_cpu_ms = 0, system_cpu_ms = 0;
  bool oom_killed = false;
  bool pids_limit_hit = false;
};

struct CgroupHierarchy;
class Launcher;
class Reaper;
class ChildSetup;
enum class Placement;

class CommandCgroup {
 public:
  ~CommandCgroup();
  CommandCgroup(const CommandCgroup&) = delete;
  CommandCgroup& operator=(const CommandCgroup&) = delete;

  // The cgroup.procs files the child writes "0" into (open, close-on-exec);
  // closed by close_join_fds() once the child has exec'd or failed.
  const std::vector<int>& join_fds() const { return join_fds_; }
  void close_join_fds();
  // v2: the directory, open for clone3's CLONE_INTO_CGROUP (-1 on v1);
  // closed with the join fds.
  int dir_fd() const { return dir_fd_; }

  const std::string& name() const { return name_; }
  // A spare's launcher (pty/launcher), waiting inside it to start the
  // command there; nullptr when it has none or its launcher is of no use.
  Launcher* launcher() const;
  // The command has started (through the launcher or not): what is left of
  // the launcher goes. It exits (used: right after the command's exec), but
  // until the reaper has it, it is a member that is none of the command's:
  // population() does not count it.
  void drop_launcher();
  // The command has ended: a launcher of its start still here (stopped,
  // say) is killed, so that it leaves the cgroup.
  void let_launcher_go();
  // Processes in it now (-1 if it cannot be read).
  int population() const;
  // SIGKILL to every member, setsid() ones included. Returns how many were signalled.
  int kill_all();
  // Sends `sig` to every member (no freeze: for TERM and the like).
  void signal_all(int sig);
  CgroupUsage usage() const;
  // Closes the counter files kept open for usage(), which then reads by
  // path. For when the command is done with its cgroup.
  void close_counters();
  // rmdir in every hierarchy; false if still populated (or already gone: true).
  bool try_remove();

 private:
  friend class Containment;
  CommandCgroup() = default;
  std::vector<int> read_pids() const;
  // The directories are gone: release what only they needed.
  void mark_removed();
  // A new object for the same directories, taking this one's descriptors;
  // this one is then as if removed, so that whoever still holds it (a
  // finished record) sees nothing of the next command.
  std::shared_ptr<CommandCgroup> hand_over();
  // Pool side of reuse: counters back to zero, the child's cgroup.procs
  // opened again. False when this cgroup should not serve another command
  // (a member, an OOM kill, memory charged to it still, a failed write).
  bool reset_for_reuse();
  // mkdir in every hierarchy this cgroup joins, cgroup.procs opened for the
  // child. Touches nothing but this object: runs on the loop or the pool.
  // Returns the step that failed (errno set), empty on success.
  std::string make_dirs(const std::vector<CgroupHierarchy>& hierarchies, const ResourceLimits& limits);
  // Undoes a make_dirs that failed or is no longer wanted.
  void discard();
  // v1: opens the counter files the end of a command reads (-1 where one
  // cannot be opened: that one is read by path).
  void open_counters();

  std::string name_;
  std::vector<std::string> dirs_;  // every hierarchy's directory of this cgroup
  std::string procs_dir_;          // where membership is read
  std::string memory_dir_, pids_dir_, freezer_dir_, cpuacct_dir_;
  bool v2_ = false;
  bool removed_ = false;
  bool reusable_ = false;   // made without limits
  bool signalled_ = false;  // killed, frozen or signalled: removed, not reused
  std::vector<int> join_fds_;
  int dir_fd_ = -1;
  std::unique_ptr<Launcher> launcher_;
  // The launcher that started this cgroup's command, until reaped.
  pid_t departing_pid_ = -1;
  std::shared_ptr<const bool> departing_reaped_;
  bool departing_here() const { return departing_pid_ > 0 && departing_reaped_ && !*departing_reaped_; }
  // Opened with the directories (on the pool, for a cgroup made ahead), so
  // that a command's end reads its counters without a path walk and an open
  // of each file, which had been ~100 us of every round trip.
  // Not cgroup.procs: v1 caches a pidlist per open file for a second, so a
  // re-read through a kept descriptor (at the start of a reused cgroup's
  // command, then at its end) saw the old, empty list: leftovers went
  // uncounted and their cgroup was handed to the next command.
  // So cgroup.procs is opened afresh each time, but relative to its
  // directory (kProcsDir, O_PATH): the path walk through sysfs was half of
  // that open after an idle pause, on the way to every command's result.
  enum Counter { kCpuTotal, kCpuSplit, kMemoryPeak, kOomControl, kPidsEvents, kProcsDir, kCounters };
  int counter_fds_[kCounters] = {-1, -1, -1, -1, -1, -1};
  bool read_procs(std::string& out) const;
};

// Whatever counts time against what runs in execd's cgroups (a command's
// timeout, a session run's, a kernel's heartbeat deadline) stops counting
// while they are frozen: POST /freeze must not make a timeout fire.
class FreezeListener {
 public:
  virtual ~FreezeListener() = default;
  virtual void on_freeze() = 0;
  // `frozen_ms`: how long it was frozen.
  virtual void on_thaw(uint64_t frozen_ms) = 0;
};

// A timer stopped by a freeze: what it had left, restarted at the thaw.
// hold() returns 0 for a timer that was not running.
uint64_t hold_timer(uv_timer_t* t);
void resume_timer(uv_timer_t* t, uint64_t held, uv_timer_cb cb);

struct FreezeOutcome {
  bool ok = false;
  int status = 200;           // the HTTP status a failure maps to
  std::string detail;         // why not, or how it went
  size_t cgroups = 0;         // command cgroups frozen (or thawed)
  int64_t processes = 0;      // processes in them
  uint64_t took_ms = 0;
};

// One hierarchy execd makes its cgroups in (v2: the only one).
struct CgroupHierarchy {
  std::string base;  // .../execd-<pid>
  std::set<std::string> controllers;
};

// The daemon-wide side, owned by the daemon: set up once, then used from the
// loop thread only.
class Containment {
 public:
  Containment() = default;
  Containment(const Containment&) = delete;
  Containment& operator=(const Containment&) = delete;

  // `enabled` false (--no-cgroups) or no usable cgroup: process-group mode.
  // `parent`: a cgroup path (as in /proc/self/cgroup) under which execd-<pid>
  // is made; empty = execd's own cgroup. Returns a line for the log.
  std::string init(uv_loop_t* loop, bool enabled, const std::string& parent);
  ContainmentMode mode() const { return mode_; }
  bool has_cgroups() const { return mode_ == ContainmentMode::cgroup_v1 || mode_ == ContainmentMode::cgroup_v2; }
  // The runs' keepers (subreaper mode; empty otherwise).
  Keepers& keepers() { return keepers_; }
  // Up to `count` spares get a launcher each (pty/launcher), so that a
  // command without limits starts in its cgroup with no cgroup.procs
  // write; 0: none. `setup` says which signals a child gets back to their
  // defaults. v1 only for now (see make_ahead).
  void enable_launchers(Reaper* reaper, const ChildSetup* setup, size_t count);
  // How commands got into their cgroups (Spawned::placement), for
  // GET /activity; and launchers waiting in spares now.
  struct StartCounts {
    uint64_t launcher = 0, clone_into_cgroup = 0, joined = 0, none = 0, keeper = 0;
    // Given up on while waited for (stopped, traced, too slow: killed): a
    // launcher (its command then started another way), and a process
    // started from execd itself (its start failed).
    uint64_t launcher_given_up = 0, child_given_up = 0;
  };
  void count_start(Placement p);
  void count_launcher_given_up(const std::string& why);
  void count_child_given_up(const std::string& why);
  const StartCounts& starts() const { return starts_; }
  // What the last one given up on was (empty: none yet).
  const std::string& last_given_up() const { return last_given_up_; }
  size_t waiting_launchers() const;
  // Why launchers were turned off (empty: they were not).
  const std::string& launcher_error() const { return launcher_error_; }
  // A new cgroup with `limits` applied; nullptr in process-group mode (error
  // empty) or when it cannot be made (error set).
  std::shared_ptr<CommandCgroup> create(const ResourceLimits& limits, std::string& error);
  // Keeps a command's cgroup after its command let go of it: killed at
  // `deadline_ms` (uv_now time; 0 = never), removed when empty.
  void linger(std::shared_ptr<CommandCgroup> cg, uint64_t deadline_ms);
  // A command is done with its cgroup: `empty` when it read no member left.
  // An empty cgroup made without limits and never signalled goes back to
  // the spares (counters reset on the threadpool) while there are fewer
  // than kMaxSpares; any other lingers as above.
  void release(std::shared_ptr<CommandCgroup> cg, bool empty, uint64_t deadline_ms);
  // Cgroups of finished commands whose processes still run (their shell
  // exited and left them).
  size_t lingering_with_members() const;

  // --- Pause cooperation (POST /freeze, /thaw) ---
  // Whether this mode can freeze: v2, or v1 with a freezer hierarchy.
  bool can_freeze() const;
  // Frozen or freezing: nothing may start a process (a child joining a
  // frozen cgroup between vfork and exec would stop execd with it).
  bool frozen() const { return frozen_; }
  // Freezes every cgroup execd made, at once (the freezer is hierarchical:
  // execd-<pid> is frozen, and with it every cmd-<n> below it) and calls
  // `done` when the kernel reports the whole tree frozen, or at
  // `deadline_ms` (uv_now time) with the tree thawed again.
  void freeze(uint64_t deadline_ms, std::function<void(FreezeOutcome)> done);
  FreezeOutcome thaw();
  void add_freeze_listener(FreezeListener* l) { freeze_listeners_.insert(l); }
  void remove_freeze_listener(FreezeListener* l) { freeze_listeners_.erase(l); }
  // Kills every command cgroup there is (live and lingering).
  void kill_everything();
  // Kills everything, waits (bounded) for the members to go, removes every
  // directory execd made. Last thing before exit (idempotent). A spare still
  // being made is removed, with execd-<pid>, when its job comes back: the
  // loop must run once more (as for close()).
  void shutdown();
  // Closes the loop handle init() made; the loop must run once more before
  // this object goes.
  void close();

 private:
  struct Lingering {
    std::shared_ptr<CommandCgroup> cg;
    uint64_t deadline_ms;
  };
  struct RemovalJob;
  struct MakeJob;
  struct ReuseJob;
  void on_linger_tick();
  void on_removal_done(RemovalJob& job);
  // Keeps kReadyCgroups unlimited cgroups (cmd-<n>, counters open) made
  // ahead on the threadpool, so that a command without limits starts with
  // no mkdir and no open on the loop. v1 only: untried on v2 (no v2 machine
  // here), where the mkdir stays at the start.
  // From the first command on: an idle execd that ran none has no threadpool.
  void make_ahead();
  void on_made(MakeJob& job);
  void on_reset(ReuseJob& job);
  // A cgroup that comes back after shutdown() (a threadpool job, a command
  // object released late): removed, then execd-<pid> again, whose rmdir in
  // shutdown() failed while this one was there.
  void remove_after_shutdown(CommandCgroup& cg);
  // Gives launchers to ready spares until launchers_ of them have one.
  void arm_spares();
  void arm_soon();  // arm_spares once the loop has nothing ready (arm_when_idle)
  // v1; and v2 where clone3 cannot start children in their cgroups, for
  // the launchers (v2 reuses none: release() removes them).
  bool spares_wanted() const {
    return mode_ == ContainmentMode::cgroup_v1 || (mode_ == ContainmentMode::cgroup_v2 && !clone_into_cgroup_);
  }
  std::shared_ptr<CommandCgroup> new_cgroup();
  void track(const std::shared_ptr<CommandCgroup>& cg);
  // Drops the entries of all_ whose cgroup is gone (and their control blocks).
  void forget_expired();

  // process-group, or subreaper where keepers can be started; the log line.
  std::string without_cgroups(const std::string& why);
  uv_loop_t* loop_ = nullptr;
  Keepers keepers_;
  ContainmentMode mode_ = ContainmentMode::process_group;
  std::vector<CgroupHierarchy> hierarchies_;
  uint64_t next_id_ = 0;
  std::vector<std::weak_ptr<CommandCgroup>> all_;
  std::vector<Lingering> lingering_;
  uv_timer_t timer_{};
  bool timer_open_ = false;
  bool removing_ = false;  // a removal job is on the threadpool
  // Spares: made ahead up to kReadyCgroups, kept from finished commands up
  // to kMaxSpares (after a burst, the rest are removed).
  static constexpr size_t kReadyCgroups = 2;
  static constexpr size_t kMaxSpares = 8;
  std::vector<std::shared_ptr<CommandCgroup>> ready_;
  bool making_ = false;  // a make-ahead job is on the threadpool
  Reaper* reaper_ = nullptr;
  const ChildSetup* child_setup_ = nullptr;
  size_t launchers_ = 0;  // --cgroup-spares
  std::string launcher_error_;
  StartCounts starts_;
  std::string last_given_up_;
  bool clone_into_cgroup_ = false;  // v2 and clone3 usable (pty/spawn)
  // Spares are armed once the loop has nothing ready (arm_soon): see cgroup.cc.
  void arm_when_idle();
  uv_prepare_t arm_prepare_{};
  bool arm_prepare_open_ = false;
  int arm_deferrals_ = 0;
  size_t resetting_ = 0;  // reuse jobs on the threadpool
  std::vector<std::string> bases_after_shutdown_;  // for what comes back after it

  // Freezing.
  std::string freeze_file() const;  // v1 freezer.state or v2 cgroup.freeze of execd-<pid>
  bool tree_frozen() const;          // what the kernel says of execd-<pid>
  void on_freeze_poll();
  void count_members(FreezeOutcome& o) const;
  bool frozen_ = false;
  uint64_t frozen_since_ms_ = 0;
  uint64_t freeze_deadline_ms_ = 0;
  uv_timer_t freeze_timer_{};
  bool freeze_timer_open_ = false;
  std::vector<std::function<void(FreezeOutcome)>> freeze_waiters_;
  std::set<FreezeListener*> freeze_listeners_;
};

// Whether a descriptor the loop watches is ready now, looked at without
// blocking and without changing the order libuv will see them in.
bool loop_has_ready_io(uv_loop_t* loop);

}  // namespace execd::pty
