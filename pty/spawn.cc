// pty/spawn: see header.
#include "pty/spawn.h"

// The locals read by the vfork child are set before vfork and never changed
// after it, which is what -Wclobbered cannot see.
#pragma GCC diagnostic ignored "-Wclobbered"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>

#include "pty/confine.h"

namespace execd::pty {
namespace {

// Filled by the vfork child (which shares our memory) when a step fails.
struct ChildFailure {
  volatile int err = 0;
  volatile const char* step = nullptr;
  volatile int candidate = -1;  // which of SpawnOptions::search failed to exec
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

}  // namespace

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
  const char* program = opts.program.empty() ? nullptr : opts.program.c_str();

  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, in_pipe[2] = {-1, -1};
  int master = -1, slave = -1, devnull = -1;
  auto cleanup = [&] {
    close_pair(out_pipe);
    close_pair(err_pipe);
    close_pair(in_pipe);
    if (master >= 0) close(master);
    if (slave >= 0) close(slave);
    if (devnull >= 0) close(devnull);
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
    } else {
      devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (devnull < 0) return fail("open /dev/null");
    }
  }

  const int child_in = opts.use_pty ? slave : (opts.pipe_stdin ? in_pipe[0] : devnull);
  const int child_out = opts.use_pty ? slave : out_pipe[1];
  const int child_err = opts.use_pty ? slave : err_pipe[1];
  const char* cwd = opts.cwd.empty() ? nullptr : opts.cwd.c_str();
  const bool set_creds = opts.uid.has_value();
  const uid_t uid = set_creds ? *opts.uid : 0;
  const gid_t gid = opts.gid ? *opts.gid : 0;
  const bool use_pty = opts.use_pty;
  const bool inherit_stdio = opts.inherit_stdio && !opts.use_pty;
  const bool new_session = opts.new_session;
  const int extra_fd3 = opts.extra_fd3;
  const int* join_fds = place.cgroup_procs_fds.data();
  const size_t join_count = place.cgroup_procs_fds.size();
  char oom_adj[16] = {0};
  size_t oom_adj_len = 0;
  if (place.oom_score_adj)
    oom_adj_len = static_cast<size_t>(snprintf(oom_adj, sizeof oom_adj, "%d", *place.oom_score_adj));
  ChildFailure failure;
  const ChildSetup::Signals& reset = place.setup ? place.setup->signals() : ChildSetup::none();
  const struct rlimit* child_nofile = place.setup ? place.setup->child_nofile() : nullptr;

  // Isolation and hardening (pty/confine): two child steps; the pid
  // namespace is chosen by this thread before the vfork.
  const IsolatedEntry* isolated = opts.isolated;
  const Hardening* hardening = place.setup ? place.setup->hardening() : nullptr;
  PidNamespaceScope pid_namespace(isolated);
  if (pid_namespace.error()) {
    errno = pid_namespace.error();
    return fail("enter the session's pid namespace");
  }

  // Block every signal so no handler of ours runs in the child before it has
  // reset the dispositions to their defaults.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);

  pid_t pid = vfork();
  if (pid == 0) {
    const KernelSigaction dfl{reinterpret_cast<void*>(SIG_DFL), 0, nullptr, 0};
    for (int i = 0; i < reset.count; ++i) kernel_sigaction(reset.list[i], &dfl, nullptr);
    if (use_pty) {
      if (setsid() < 0) child_fail(&failure, "setsid");
      if (ioctl(child_in, TIOCSCTTY, 0) < 0) child_fail(&failure, "TIOCSCTTY");
    } else if (new_session) {
      if (setsid() < 0) child_fail(&failure, "setsid");
    } else if (setpgid(0, 0) < 0) {
      child_fail(&failure, "setpgid");
    }
    if (!inherit_stdio && (dup2(child_in, 0) < 0 || dup2(child_out, 1) < 0 || dup2(child_err, 2) < 0))
      child_fail(&failure, "dup2");
    if (extra_fd3 >= 0) {
      if (extra_fd3 == 3 ? fcntl(3, F_SETFD, 0) < 0 : dup2(extra_fd3, 3) < 0) child_fail(&failure, "dup2 fd 3");
    }
    // Into the command's cgroup before anything it runs can fork: "0" is the
    // writing process itself.
    for (size_t i = 0; i < join_count; ++i)
      if (write(join_fds[i], "0", 1) != 1) child_fail(&failure, "join cgroup");
    if (oom_adj_len) {
      // A vfork child's write changes only its own score (the kernel skips
      // the mm-sharing parent for a vfork child).
      int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
      if (fd >= 0) {
        if (write(fd, oom_adj, oom_adj_len) < 0) {
          // best effort
        }
        close(fd);
      }
    }
    if (const char* step = confine_before_credentials(isolated, hardening)) child_fail(&failure, step);
    if (set_creds) {
      if (setgroups(opts.groups.size(), opts.groups.data()) < 0) child_fail(&failure, "setgroups");
      if (setgid(gid) < 0) child_fail(&failure, "setgid");
      if (setuid(uid) < 0) child_fail(&failure, "setuid");
    }
    if (cwd && chdir(cwd) < 0) child_fail(&failure, "chdir");
    if (child_nofile) setrlimit(RLIMIT_NOFILE, child_nofile);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (const char* step = confine_before_exec(isolated, hardening)) child_fail(&failure, step);
    if (program) {
      execve(program, argv.data(), envp.data());
      child_fail(&failure, "exec");
    }
    // As execvpe, without its shell fallback: a missing or forbidden
    // candidate moves on; any other failure is that program's.
    bool forbidden = false;
    for (size_t i = 0; i < search.size(); ++i) {
      execve(search[i], argv.data(), envp.data());
      if (errno == EACCES) {
        forbidden = true;
      } else if (errno != ENOENT && errno != ENOTDIR && errno != ENAMETOOLONG && errno != ELOOP) {
        failure.candidate = static_cast<int>(i);
        child_fail(&failure, "exec");
      }
    }
    errno = forbidden ? EACCES : ENOENT;
    child_fail(&failure, kLookupStep);
  }
  int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) {
    errno = fork_errno;
    return fail("vfork");
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
  if (use_pty) {
    close(slave);
    slave = -1;
    out.stdin_fd = out.stdout_fd = master;
    master = -1;
  } else if (inherit_stdio) {
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
    if (devnull >= 0) close(devnull);
    devnull = -1;
  }
  for (int fd : {out.stdin_fd, out.stdout_fd, out.stderr_fd})
    if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return 0;
}

}  // namespace execd::pty
