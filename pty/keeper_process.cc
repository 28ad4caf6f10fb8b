// pty/keeper_process: see header. libc only (built alone, statically).
#include "pty/keeper_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_set>
#include <vector>

namespace execd::pty {

namespace {

// The children of every thread of `pid`, appended to `out`.
void children_of(pid_t pid, std::vector<pid_t>& out) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task", static_cast<int>(pid));
  DIR* d = opendir(path);
  if (!d) return;
  std::string text;
  while (struct dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char file[320];
    snprintf(file, sizeof file, "/proc/%d/task/%s/children", static_cast<int>(pid), e->d_name);
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    text.clear();
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
    close(fd);
    const char* p = text.c_str();
    while (*p) {
      char* end;
      long v = strtol(p, &end, 10);
      if (end == p) break;
      if (v > 0) out.push_back(static_cast<pid_t>(v));
      p = end;
    }
  }
  closedir(d);
}

}  // namespace

// Every process below `root`, each once (a pid is listed under one parent;
// the set guards against one seen again as it is re-parented mid-walk).
std::vector<pid_t> tree_below(pid_t root) {
  std::vector<pid_t> all;
  std::unordered_set<pid_t> seen;
  std::vector<pid_t> next;
  children_of(root, next);
  while (!next.empty()) {
    pid_t p = next.back();
    next.pop_back();
    if (!seen.insert(p).second) continue;
    all.push_back(p);
    children_of(p, next);
  }
  return all;
}

// Gone, a zombie, or on its way out (PF_EXITING: set as its exit begins,
// before its descriptors close, so a reader that saw its pipe's end never
// counts it as left over).
bool is_gone_or_exiting(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;  // gone
  ssize_t len = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (len <= 0) return true;
  buf[len] = 0;
  const char* p = strrchr(buf, ')');  // comm may hold anything
  char state = 0;
  int ppid = 0, pgrp = 0, session = 0, tty = 0, tpgid = 0;
  unsigned flags = 0;
  if (!p || sscanf(p + 1, " %c %d %d %d %d %d %u", &state, &ppid, &pgrp, &session, &tty, &tpgid, &flags) != 7)
    return true;
  constexpr unsigned kPfExiting = 0x4;
  return state == 'Z' || state == 'X' || (flags & kPfExiting);
}

namespace {

int64_t timeval_us(const struct timeval& tv) { return int64_t(tv.tv_sec) * 1000000 + tv.tv_usec; }

void fill_usage(KeeperReport& r) {
  struct rusage ru {};
  getrusage(RUSAGE_CHILDREN, &ru);
  r.user_us = timeval_us(ru.ru_utime);
  r.system_us = timeval_us(ru.ru_stime);
  r.max_rss_kib = ru.ru_maxrss;
}

void send_report(int fd, KeeperReport::Kind kind, int wait_status) {
  KeeperReport r;
  r.kind = kind;
  r.wait_status = wait_status;
  fill_usage(r);
  // execd gone (EPIPE; SIGPIPE is blocked): nobody to tell.
  while (write(fd, &r, sizeof r) < 0 && errno == EINTR) {
  }
}

void signal_tree(int sig) {
  for (pid_t p : tree_below(getpid())) kill(p, sig);
}

}  // namespace

bool is_keeper_invocation(int argc, char** argv) { return argc >= 2 && strcmp(argv[1], "--keeper") == 0; }

void keeper_main(int argc, char** argv) {
  pid_t leader = argc > 2 ? static_cast<pid_t>(atoi(argv[2])) : -1;
  pid_t execd = argc > 3 ? static_cast<pid_t>(atoi(argv[3])) : -1;
  // Every signal is taken with sigtimedwait, none by a handler; SIGCHLD
  // must not be ignored (that reaps by itself, and loses the usage).
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, nullptr);
  signal(SIGCHLD, SIG_DFL);
  prctl(PR_SET_NAME, "execd-keeper", 0, 0, 0);
  // Dies with execd, killing its tree first (SIGUSR2 below).
  prctl(PR_SET_PDEATHSIG, SIGUSR2, 0, 0, 0);
  bool dying = getppid() != execd;
  // The command (another uid) may neither trace it nor read its memory.
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);  // kept across the exec; again, to be sure
  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull >= 0)
    for (int fd = 0; fd < 3; ++fd) dup2(devnull, fd);
  syscall(SYS_close_range, 4, ~0U, 0);
  const int report = 3;

  sigset_t wanted;
  sigemptyset(&wanted);
  for (int s : {SIGCHLD, SIGUSR1, SIGUSR2, SIGTERM, SIGHUP, SIGINT}) sigaddset(&wanted, s);
  bool leader_done = false, leader_reported = false, killing = false;
  int leader_status = 0;
  for (;;) {
    bool none_left = false;
    for (;;) {
      int st = 0;
      pid_t p = waitpid(-1, &st, WNOHANG);
      if (p == 0) break;
      if (p < 0) {
        if (errno == EINTR) continue;
        none_left = true;  // ECHILD
        break;
      }
      if (p == leader) {
        leader_done = true;
        leader_status = st;
      }
    }
    if (leader_done && !leader_reported) {
      send_report(report, KeeperReport::leader_exited, leader_status);
      leader_reported = true;
    }
    if (none_left) {
      if (!leader_reported) send_report(report, KeeperReport::leader_exited, SIGKILL);
      send_report(report, KeeperReport::tree_empty, 0);
      _exit(0);
    }
    if (dying || killing) signal_tree(SIGKILL);
    siginfo_t si{};
    int s;
    if (dying || killing) {
      // Rounds until the tree is empty: what forked since the last walk.
      struct timespec ts {0, 10 * 1000 * 1000};
      s = sigtimedwait(&wanted, &si, &ts);
    } else {
      s = sigwaitinfo(&wanted, &si);
    }
    if (s == SIGUSR1) {
      // Only execd directs it (a command of the same uid would have to be root).
      if (si.si_code == SI_QUEUE && si.si_pid == execd) {
        int sig = si.si_value.sival_int;
        if (sig == SIGKILL) {
          killing = true;
        } else if (sig > 0 && sig < NSIG) {
          signal_tree(sig);
        }
      }
    } else if (s == SIGUSR2 || s == SIGTERM || s == SIGHUP || s == SIGINT) {
      dying = true;
    }
  }
}

}  // namespace execd::pty
