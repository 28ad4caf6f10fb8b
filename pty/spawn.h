// pty/spawn: starting a process, fast and with everything set before exec:
// its own process group (or session, for a PTY), credentials with the user's
// supplementary groups, working directory, environment, and stdio as pipes
// or a PTY. The child shares execd's memory until its exec, as a vfork child
// does, so the cost stays close to posix_spawn (pty/vm_child: the wait for
// it has a deadline); it only makes async-signal-safe system calls before
// its exec.
#pragma once

#include <signal.h>
#include <sys/resource.h>

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace execd::pty {

class Hardening;       // pty/hardening
class Launcher;        // pty/launcher
struct IsolatedEntry;  // pty/confine

struct SpawnOptions {
  std::string program;             // a path (relative: from cwd), or empty to search `search`
  std::vector<std::string> argv;
  // An argv command with a bare name: the candidates (PATH's absolute
  // entries + "/" + name), tried in order by the child after its chdir and
  // credentials, so the lookup is the command's own (its PATH, its uid).
  std::vector<std::string> search;
  // Set for argv commands: start failures are worded as Go's os/exec words
  // them for this name ('exec: "x": executable file not found in $PATH',
  // "fork/exec ./x: permission denied").
  std::string lookup_name;
  std::vector<std::string> env;    // "K=V"
  std::string cwd;                 // empty = inherit
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
  std::vector<gid_t> groups;       // used only with uid
  bool use_pty = false;
  bool pipe_stdin = false;         // pipes: stdin is a pipe instead of /dev/null
  unsigned short rows = 24, cols = 80;
  bool new_session = false;        // pipes: setsid() instead of setpgid() (bash sessions)
  int extra_fd3 = -1;              // if >= 0: becomes the child's fd 3 (bash session status channel)
  bool inherit_stdio = false;      // keep execd's fds 0-2 (the --init entrypoint): no pipes
  // An isolated run: the session's namespaces to enter (pty/confine); the
  // session owns it and outlives the spawn.
  const IsolatedEntry* isolated = nullptr;
};

// How the child got into its cgroup.
enum class Placement {
  none,               // no cgroup (process-group mode, or it could not be made)
  joined,             // the child wrote itself into cgroup.procs (a migration)
  launcher,           // a launcher waiting in the cgroup started it there (pty/launcher)
  clone_into_cgroup,  // born in it (clone3 CLONE_INTO_CGROUP, cgroup v2)
  keeper,             // no cgroup: under a keeper of its own (pty/keeper), which is `pid`
};

struct Spawned {
  pid_t pid = -1;      // execd's child: the command, or its keeper (Placement::keeper)
  pid_t leader = -1;   // the command itself (under a keeper: the keeper's child)
  Placement placement = Placement::none;
  int stdin_fd = -1;   // pipe write end or PTY master (same fd as stdout_fd for a PTY)
  int stdout_fd = -1;  // pipe read end or PTY master
  int stderr_fd = -1;  // pipe read end; -1 for a PTY
  // Not empty: the launcher was given up on (stopped, traced, too slow) and
  // the child started another way; says why.
  std::string launcher_given_up;
  // The child itself was given up on (the start failed with ETIMEDOUT).
  bool child_given_up = false;
};

// What every child gets back from execd's own process state: the soft
// open-files limit execd was started with (it raises its own), and the
// default action of every signal execd handles or ignores. One per daemon
// (in pty::Runtime); which signals to reset is read at the first spawn, so
// execd sets all of its signal handling up before it starts a process.
class ChildSetup {
 public:
  struct Signals {
    int list[NSIG];
    int count = -1;  // -1: not read yet
  };
  // Raises execd's own soft open-files limit to the hard limit (a daemon
  // that holds every client's socket needs them) while children keep being
  // started with the soft limit execd was given, as Go's runtime does.
  // Returns the new soft limit.
  uint64_t raise_open_files_limit();
  const Signals& signals() const;
  // The limit children get back, if execd raised its own.
  const struct rlimit* child_nofile() const { return restore_nofile_ ? &child_nofile_ : nullptr; }
  static const Signals& none() {
    static const Signals empty{{}, 0};
    return empty;
  }
  // The hardening floor every child stands on (pty/hardening; main owns it).
  void set_hardening(const Hardening* h) { hardening_ = h; }
  const Hardening* hardening() const { return hardening_; }

 private:
  struct rlimit child_nofile_ {};
  bool restore_nofile_ = false;
  // Resetting every one of the 64 in the child had cost 15 us per spawn
  // (70 under load), with the parent stopped meanwhile.
  mutable Signals signals_;
  const Hardening* hardening_ = nullptr;
};

// Where the child goes before exec (set by pty::Command, not by callers).
struct ChildPlacement {
  const ChildSetup* setup = nullptr;
  // cgroup.procs files (open for writing) the child joins, by writing "0"
  // into each, before it changes credentials or execs (pty/cgroup).
  std::vector<int> cgroup_procs_fds;
  // cgroup v2: the cgroup's directory, for clone3's CLONE_INTO_CGROUP (the
  // child is born in it); -1, or a kernel that refuses: cgroup_procs_fds.
  int cgroup_dir_fd = -1;
  // A launcher made ahead inside the command's cgroup (pty/launcher): it
  // starts the child there, which joins nothing. If it is gone (or given
  // up on), the child is started here and joins cgroup_procs_fds.
  Launcher* launcher = nullptr;
  // Written to the child's /proc/self/oom_score_adj (the OOM killer takes a
  // command before execd); unset: inherited.
  std::optional<int> oom_score_adj;
  // Containment without cgroups (pty/keeper): execd's binary (O_PATH) and
  // the report pipe's write end. The child becomes the keeper: a child
  // subreaper that starts the command (vfork-style, on execd's memory),
  // then execs `execd --keeper` with the pipe as its fd 3.
  int keeper_exe_fd = -1;
  int keeper_report_fd = -1;
};

// Returns 0, or an errno with `error` describing the failing step (ETIMEDOUT:
// the child was stopped, traced or too slow before its exec, and is killed).
// All returned fds are non-blocking and close-on-exec.
// The child gets back what `place.setup` says (signals, open-files limit).
int spawn_process(const SpawnOptions& opts, Spawned& out, std::string& error, const ChildPlacement& place = {});

// Whether clone3 with CLONE_INTO_CGROUP can start children here (x86-64, a
// kernel with clone3, no seccomp profile hiding it; EXECD_NO_CLONE3 set in
// the environment says no, for tests). Decides for every later spawn.
bool probe_clone_into_cgroup();

// Lowers execd's own oom_score_adj; false with errno if the kernel refused
// (it needs CAP_SYS_RESOURCE, and some sandboxes refuse it to root too).
bool protect_from_oom_killer(int adj);

// Sets KEY=value in a "K=V" environment list, replacing an existing KEY.
void set_env(std::vector<std::string>& env, const std::string& key, const std::string& value);

// Finds `name` in $PATH (as execd saw it at start); empty if absent.
std::string find_in_path(const std::string& name);

}  // namespace execd::pty
