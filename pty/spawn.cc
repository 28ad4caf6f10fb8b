// pty/spawn: see header.
#include "pty/spawn.h"

// The locals read by the child are set before it starts and never changed
// after, which is what -Wclobbered cannot see.
#pragma GCC diagnostic ignored "-Wclobbered"

#include <fcntl.h>
#include <sched.h>
#include <grp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>

#include "pty/confine.h"
#include "pty/hardening.h"
#include "pty/launcher.h"
#include "pty/vm_child.h"

namespace execd::pty {
namespace {

// Filled by the child (which shares our memory until its exec) when a step fails.
struct ChildFailure {
  volatile int err = 0;
  volatile const char* step = nullptr;
  volatile int candidate = -1;  // which of SpawnOptions::search failed to exec
  volatile pid_t leader = -1;   // under a keeper: the command's pid (the keeper's child)
};

constexpr const char* kLookupStep = "lookup";

// Go's errno texts are strerror's in lower case.
std::string go_errno_text(int err) {
  std::string t = strerror(err);
  if (!t.empty()) t[0] = static_cast<char>(tolower(static_cast<unsigned char>(t[0])));
  return t;
}

std::string describe_failure(const SpawnOptions& opts, const char* step, int err, int candidate) {
  if (opts.lookup_name.empty()) return std::string(step) + ": " + strerror(err);
  if (step == kLookupStep)
    return "exec: \"" + opts.lookup_name + "\": " +
           (err == EACCES ? std::string("permission denied") : std::string("executable file not found in $PATH"));
  if (strcmp(step, "exec") == 0) {
    const std::string& path = candidate >= 0 ? opts.search[static_cast<size_t>(candidate)] : opts.program;
    return "fork/exec " + path + ": " + go_errno_text(err);
  }
  if (strcmp(step, "chdir") == 0) return "chdir " + opts.cwd + ": " + go_errno_text(err);
  return std::string(step) + ": " + strerror(err);
}

[[noreturn]] void child_fail(ChildFailure* f, const char* step) {
  f->err = errno;
  f->step = step;
  _exit(127);
}

void close_pair(int fds[2]) {
  for (int i = 0; i < 2; ++i)
    if (fds[i] >= 0) close(fds[i]);
}

// The kernel's own sigaction: glibc refuses its two internal signals (32
// and 33), and one of them can arrive ignored from whatever started execd
// (a CI runner did), which exec would pass on to every command.
struct KernelSigaction {
  void* handler;
  unsigned long flags;
  void* restorer;
  uint64_t mask;
};

int kernel_sigaction(int sig, const KernelSigaction* act, KernelSigaction* old) {
  return static_cast<int>(syscall(SYS_rt_sigaction, sig, act, old, sizeof(uint64_t)));
}

// Everything the child reads, prepared before it starts: between its clone
// (here or in a launcher) and exec it must not allocate.
struct ChildPlan {
  const ChildSetup::Signals* reset = nullptr;
  bool use_pty = false, inherit_stdio = false, new_session = false;
  int child_in = -1, child_out = -1, child_err = -1, extra_fd3 = -1;
  const int* join_fds = nullptr;
  size_t join_count = 0;
  char oom_adj[16] = {0};
  size_t oom_adj_len = 0;
  const IsolatedEntry* isolated = nullptr;
  const Hardening* hardening = nullptr;
  bool set_creds = false;
  uid_t uid = 0;
  gid_t gid = 0;
  const gid_t* groups = nullptr;
  size_t group_count = 0;
  const char* cwd = nullptr;
  const struct rlimit* child_nofile = nullptr;
  const char* program = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* const* search = nullptr;
  size_t search_count = 0;
  ChildFailure* failure = nullptr;
  // Under a keeper (pty/keeper): what the keeper execs.
  int keeper_exe = -1, keeper_report = -1;
  char keeper_leader[16] = {0}, keeper_execd[16] = {0};
  char* keeper_argv[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};
  char* const* keeper_envp = nullptr;
};

[[noreturn]] void run_command_child(const ChildPlan& c);
int command_child_entry(void* p) { run_command_child(*static_cast<const ChildPlan*>(p)); }

// The keeper's side (pty/keeper), on execd's memory: a subreaper, then the
// command as its child (CLONE_VFORK: it waits until that has exec'd or
// failed), then `execd --keeper`. What the command's process fails at is in
// the shared ChildFailure, as without a keeper.
// The command's process runs on a buffer of this frame, which stays (the
// keeper is stopped in the clone) until that process has exec'd: inside the
// vm_child stack, whose shadow is cleared with it under ASan (not
// instrumented here, so that the buffer is a plain part of the stack).
constexpr size_t kCommandChildStack = 96 * 1024;
[[noreturn]] __attribute__((no_sanitize_address)) void run_keeper_child(const ChildPlan& c) {
  ChildFailure* failure = c.failure;
  alignas(64) char stack[kCommandChildStack];
  if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) child_fail(failure, "become a subreaper");
  pid_t leader = clone(command_child_entry, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD,
                       const_cast<ChildPlan*>(&c));
  if (leader < 0) child_fail(failure, "start the command under its keeper");
  if (failure->step) _exit(127);
  failure->leader = leader;
  // The pid as text, into the argv prepared for it (nothing allocates here).
  char digits[16];
  int n = 0;
  for (unsigned v = static_cast<unsigned>(leader); v && n < 15; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
  for (int i = 0; i < n; ++i) c.keeper_argv[2][i] = digits[n - 1 - i];
  c.keeper_argv[2][n] = 0;
  if (c.keeper_report == 3 ? fcntl(3, F_SETFD, 0) < 0 : dup2(c.keeper_report, 3) < 0)
    child_fail(failure, "keeper's report pipe");
  syscall(SYS_execveat, c.keeper_exe, "", c.keeper_argv, c.keeper_envp, AT_EMPTY_PATH);
  int e = errno;
  kill(leader, SIGKILL);  // no command runs without its keeper
  errno = e;
  child_fail(failure, "exec the keeper");
}

// The child: execs, or _exits 127 with plan->failure filled.
[[noreturn]] void run_child(void* p) {
  const ChildPlan& c = *static_cast<const ChildPlan*>(p);
  const KernelSigaction dfl{reinterpret_cast<void*>(SIG_DFL), 0, nullptr, 0};
  for (int i = 0; i < c.reset->count; ++i) kernel_sigaction(c.reset->list[i], &dfl, nullptr);
  if (c.keeper_exe >= 0) run_keeper_child(c);
  run_command_child(c);
}

[[noreturn]] void run_command_child(const ChildPlan& c) {
  ChildFailure* failure = c.failure;
  if (c.use_pty) {
    if (setsid() < 0) child_fail(failure, "setsid");
    // The terminal is new, and nobody's but ours; 1 takes it back (with
    // CAP_SYS_ADMIN) from an earlier child of this very start that was
    // given up on and killed, whose session may not have let go of it yet
    // (pty/vm_child does not wait for the end of a killed child's exit).
    if (ioctl(c.child_in, TIOCSCTTY, 1) < 0) child_fail(failure, "TIOCSCTTY");
  } else if (c.new_session) {
    if (setsid() < 0) child_fail(failure, "setsid");
  } else if (setpgid(0, 0) < 0) {
    child_fail(failure, "setpgid");
  }
  if (!c.inherit_stdio && (dup2(c.child_in, 0) < 0 || dup2(c.child_out, 1) < 0 || dup2(c.child_err, 2) < 0))
    child_fail(failure, "dup2");
  if (c.extra_fd3 >= 0) {
    if (c.extra_fd3 == 3 ? fcntl(3, F_SETFD, 0) < 0 : dup2(c.extra_fd3, 3) < 0) child_fail(failure, "dup2 fd 3");
  }
  // Into the command's cgroup before anything it runs can fork: "0" is the
  // writing process itself.
  for (size_t i = 0; i < c.join_count; ++i)
    if (write(c.join_fds[i], "0", 1) != 1) child_fail(failure, "join cgroup");
  if (c.oom_adj_len) {
    // A vfork child's write changes only its own score (the kernel skips
    // the mm-sharers for a vfork child: a launcher's command process is
    // one); a CLONE_VM child's sets execd's too, which spawn_process puts
    // back.
    int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      if (write(fd, c.oom_adj, c.oom_adj_len) < 0) {
        // best effort
      }
      close(fd);
    }
  }
  if (const char* step = confine_before_credentials(c.isolated, c.hardening)) child_fail(failure, step);
  if (c.set_creds) {
    if (setgroups(c.group_count, c.groups) < 0) child_fail(failure, "setgroups");
    if (setgid(c.gid) < 0) child_fail(failure, "setgid");
    if (setuid(c.uid) < 0) child_fail(failure, "setuid");
  }
  if (c.cwd && chdir(c.cwd) < 0) child_fail(failure, "chdir");
  if (c.child_nofile) setrlimit(RLIMIT_NOFILE, c.child_nofile);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (const char* step = confine_before_exec(c.isolated, c.hardening)) child_fail(failure, step);
  if (c.program) {
    execve(c.program, c.argv, c.envp);
    child_fail(failure, "exec");
  }
  // As execvpe, without its shell fallback: a missing or forbidden
  // candidate moves on; any other failure is that program's.
  bool forbidden = false;
  for (size_t i = 0; i < c.search_count; ++i) {
    execve(c.search[i], c.argv, c.envp);
    if (errno == EACCES) {
      forbidden = true;
    } else if (errno != ENOENT && errno != ENOTDIR && errno != ENAMETOOLONG && errno != ELOOP) {
      failure->candidate = static_cast<int>(i);
      child_fail(failure, "exec");
    }
  }
  errno = forbidden ? EACCES : ENOENT;
  child_fail(failure, kLookupStep);
}


// clone3 into a cgroup (v2's CLONE_INTO_CGROUP, pty/vm_child): the child
// is born in the command's cgroup, with no migration at all.
bool clone3_usable = true;  // false once the kernel (or a seccomp profile, as Docker's) refused it

}  // namespace

bool probe_clone_into_cgroup() {
#if defined(__x86_64__)
  // A size of 0 is EINVAL where clone3 is there to be called; a seccomp
  // profile that hides it answers ENOSYS (or EPERM).
  long r = syscall(SYS_clone3, nullptr, 0);
  clone3_usable = r < 0 && errno == EINVAL && !getenv("EXECD_NO_CLONE3");
#else
  clone3_usable = false;
#endif
  return clone3_usable;
}

const ChildSetup::Signals& ChildSetup::signals() const {
  if (signals_.count >= 0) return signals_;
  signals_.count = 0;
  for (int s = 1; s < NSIG; ++s) {
    KernelSigaction now {};
    if (kernel_sigaction(s, nullptr, &now) != 0) continue;  // KILL, STOP: nothing to reset
    if (now.handler != reinterpret_cast<void*>(SIG_DFL)) signals_.list[signals_.count++] = s;
  }
  return signals_;
}

uint64_t ChildSetup::raise_open_files_limit() {
  struct rlimit lim {};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return 0;
  if (lim.rlim_cur < lim.rlim_max) {
    struct rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      child_nofile_ = lim;
      restore_nofile_ = true;
      return raised.rlim_cur;
    }
  }
  return lim.rlim_cur;
}

bool protect_from_oom_killer(int adj) {
  int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::string v = std::to_string(adj);
  bool ok = write(fd, v.data(), v.size()) == static_cast<ssize_t>(v.size());
  int e = errno;
  close(fd);
  errno = e;
  return ok;
}

void set_env(std::vector<std::string>& env, const std::string& key, const std::string& value) {
  std::string prefix = key + "=";
  for (auto& kv : env)
    if (kv.compare(0, prefix.size(), prefix) == 0) {
      kv = prefix + value;
      return;
    }
  env.push_back(prefix + value);
}

// Every command without stdin reads this one: /dev/null keeps no state, and
// an open and a close less on each start are ~20 us after an idle pause.
// Opened at the first such start (a failed open is tried again next time).
int shared_devnull() {
  static std::atomic<int> shared{-1};
  int fd = shared.load(std::memory_order_acquire);
  if (fd >= 0) return fd;
  fd = above_child_stdio(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (fd < 0) return -1;
  int expected = -1;
  if (shared.compare_exchange_strong(expected, fd, std::memory_order_acq_rel)) return fd;
  close(fd);  // another thread's start opened it first
  return expected;
}

std::string find_in_path(const std::string& name) {
  const char* path = getenv("PATH");
  std::string p = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t colon = p.find(':', start);
    std::string dir = p.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (!dir.empty()) {
      std::string candidate = dir + "/" + name;
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return {};
}

int spawn_process(const SpawnOptions& opts, Spawned& out, std::string& error, const ChildPlacement& place) {
  // Everything the child needs is prepared here: it must not allocate.
  std::vector<char*> argv, envp;
  for (const auto& a : opts.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : opts.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::vector<const char*> search;
  for (const auto& c : opts.search) search.push_back(c.c_str());

  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, in_pipe[2] = {-1, -1};
  int master = -1, slave = -1;
  auto cleanup = [&] {
    close_pair(out_pipe);
    close_pair(err_pipe);
    close_pair(in_pipe);
    if (master >= 0) close(master);
    if (slave >= 0) close(slave);
  };
  auto fail = [&](const char* what) {
    int e = errno;
    error = std::string(what) + ": " + strerror(e);
    cleanup();
    return e;
  };

  if (opts.use_pty) {
    master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0) return fail("posix_openpt");
    char name[128];
    if (grantpt(master) != 0 || unlockpt(master) != 0 || ptsname_r(master, name, sizeof name) != 0)
      return fail("pty setup");
    slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (slave < 0) return fail("open pty slave");
    struct winsize ws {};
    ws.ws_row = opts.rows;
    ws.ws_col = opts.cols;
    ioctl(master, TIOCSWINSZ, &ws);
  } else if (opts.inherit_stdio) {
    // fds 0-2 stay as they are
  } else {
    if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) return fail("pipe");
    // A bigger stdout pipe means fewer, larger reads for a fast writer (best
    // effort: the kernel may refuse past /proc/sys/fs/pipe-max-size).
    fcntl(out_pipe[0], F_SETPIPE_SZ, 1 << 20);
    if (opts.pipe_stdin) {
      if (pipe2(in_pipe, O_CLOEXEC) != 0) return fail("pipe");
    } else if (shared_devnull() < 0) {
      return fail("open /dev/null");
    }
  }

  ChildPlan plan;
  plan.reset = place.setup ? &place.setup->signals() : &ChildSetup::none();
  plan.use_pty = opts.use_pty;
  plan.inherit_stdio = opts.inherit_stdio && !opts.use_pty;
  plan.new_session = opts.new_session;
  plan.child_in = opts.use_pty ? slave : (opts.pipe_stdin ? in_pipe[0] : shared_devnull());
  plan.child_out = opts.use_pty ? slave : out_pipe[1];
  plan.child_err = opts.use_pty ? slave : err_pipe[1];
  plan.extra_fd3 = opts.extra_fd3;
  plan.join_fds = place.cgroup_procs_fds.data();
  plan.join_count = place.cgroup_procs_fds.size();
  if (place.oom_score_adj)
    plan.oom_adj_len = static_cast<size_t>(snprintf(plan.oom_adj, sizeof plan.oom_adj, "%d", *place.oom_score_adj));
  plan.isolated = opts.isolated;
  plan.hardening = place.setup ? place.setup->hardening() : nullptr;
  plan.set_creds = opts.uid.has_value();
  plan.uid = plan.set_creds ? *opts.uid : 0;
  plan.gid = opts.gid ? *opts.gid : 0;
  plan.groups = opts.groups.data();
  plan.group_count = opts.groups.size();
  plan.cwd = opts.cwd.empty() ? nullptr : opts.cwd.c_str();
  plan.child_nofile = place.setup ? place.setup->child_nofile() : nullptr;
  plan.program = opts.program.empty() ? nullptr : opts.program.c_str();
  plan.argv = argv.data();
  plan.envp = envp.data();
  plan.search = search.data();
  plan.search_count = search.size();
  ChildFailure failure;
  plan.failure = &failure;
  char keeper_name[] = "execd-keeper", keeper_flag[] = "--keeper";
  if (place.keeper_exe_fd >= 0 && !opts.isolated && !opts.inherit_stdio) {
    plan.keeper_exe = place.keeper_exe_fd;
    plan.keeper_report = place.keeper_report_fd;
    snprintf(plan.keeper_execd, sizeof plan.keeper_execd, "%d", static_cast<int>(getpid()));
    plan.keeper_argv[0] = keeper_name;
    plan.keeper_argv[1] = keeper_flag;
    plan.keeper_argv[2] = plan.keeper_leader;
    plan.keeper_argv[3] = plan.keeper_execd;
    plan.keeper_envp = environ;
  }

  // Isolation: the pid namespace is chosen by this thread before the clone.
  PidNamespaceScope pid_namespace(opts.isolated);
  if (pid_namespace.error()) {
    errno = pid_namespace.error();
    return fail("enter the session's pid namespace");
  }

  // For a child that is in its cgroup before it runs (a launcher made ahead
  // in it, or one born in it): it joins nothing.
  ChildPlan placed = plan;
  placed.join_fds = nullptr;
  placed.join_count = 0;
  pid_t pid = -1;
  if (place.launcher && !opts.isolated) {
    GiveUp why;
    pid_t p = place.launcher->run(run_child, &placed, why);
    if (p > 0) {
      pid = p;
      out.placement = Placement::launcher;
    } else if (why.happened()) {
      out.launcher_given_up =
          "launcher " + std::to_string(place.launcher->pid()) + ": " + why.describe("its command's exec");
      // What a command's process it had started wrote before it was killed
      // is not this start's.
      failure.err = 0;
      failure.step = nullptr;
      failure.candidate = -1;
    }
  }
  int fork_errno = 0;
  GiveUp gave_up;
  if (pid < 0) {
    // A process on our memory (pty/vm_child), waited for with a deadline,
    // where vfork (or clone3's CLONE_VFORK) stopped this thread in the
    // kernel for as long as the child took: a stopped child stopped execd.
    VmChild c;
    if (place.cgroup_dir_fd >= 0 && clone3_usable) {
      c = run_vm_child(run_child, &placed, place.cgroup_dir_fd);
      if (c.pid > 0) {
        out.placement = Placement::clone_into_cgroup;
      } else if (c.error == ENOSYS || c.error == EPERM || c.error == E2BIG) {
        clone3_usable = false;  // and the child below joins, as before
      }
    }
    if (c.pid <= 0 && !c.gave_up.happened()) {
      c = run_vm_child(run_child, &plan);
      out.placement = plan.keeper_exe >= 0 ? Placement::keeper : plan.join_count ? Placement::joined : Placement::none;
    }
    pid = c.pid;
    fork_errno = c.error;
    gave_up = c.gave_up;
    // It set its own oom_score_adj, and with it execd's (one per mm; a
    // vfork child's would have been its own).
    if ((pid > 0 || gave_up.happened()) && plan.oom_adj_len) restore_daemon_oom_score_adj();
  }
  if (gave_up.happened()) {
    // Stopped or traced before its exec (or that slow): killed, and this
    // start fails rather than wait on it.
    error = "the new process was " + gave_up.describe();
    out.child_given_up = true;
    cleanup();
    return ETIMEDOUT;
  }
  if (pid < 0) {
    errno = fork_errno;
    return fail("clone");
  }
  if (failure.step) {
    // The child has already _exit()ed; the reaper collects it.
    error = describe_failure(opts, const_cast<const char*>(failure.step), failure.err, failure.candidate);
    int e = failure.err;
    cleanup();
    return e ? e : EINVAL;
  }

  // Parent keeps: pipe read ends / the PTY master, and the stdin write end.
  out.pid = pid;
  out.leader = plan.keeper_exe >= 0 ? failure.leader : pid;
  if (plan.use_pty) {
    close(slave);
    slave = -1;
    out.stdin_fd = out.stdout_fd = master;
    master = -1;
  } else if (plan.inherit_stdio) {
    // nothing to keep
  } else {
    close(out_pipe[1]);
    close(err_pipe[1]);
    out.stdout_fd = out_pipe[0];
    out.stderr_fd = err_pipe[0];
    out_pipe[0] = out_pipe[1] = err_pipe[0] = err_pipe[1] = -1;
    if (opts.pipe_stdin) {
      close(in_pipe[0]);
      out.stdin_fd = in_pipe[1];
      in_pipe[0] = in_pipe[1] = -1;
    }
  }
  int nonblocking = 1;  // one ioctl rather than F_GETFL and F_SETFL
  for (int fd : {out.stdin_fd, out.stdout_fd, out.stderr_fd})
    if (fd >= 0) ioctl(fd, FIONBIO, &nonblocking);
  return 0;
}

}  // namespace execd::pty
