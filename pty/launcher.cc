// pty/launcher: see header.
#include "pty/launcher.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "pty/reaper.h"

namespace execd::pty {
namespace {

#if defined(__x86_64__) || defined(__aarch64__)
constexpr bool kSupported = true;
#else
constexpr bool kSupported = false;
#endif

constexpr int kMaxJoin = 8;

}  // namespace

// At the low end of the launcher's stack mapping (the stack grows down from
// the top): what both sides read and write.
//
// Descriptors: the launcher shares execd's table, so a number closed by
// execd while the launcher may still use it could be reused for a client's
// socket and written to or read from. The go pipe's read end and copies of
// the join fds are the launcher's own: it closes them itself (marking first:
// killed between the mark and the close, it leaks them rather than have
// someone close a reused number), and what it did not mark, execd closes
// once the launcher is gone (reaped, or past its exec).
struct Launcher::Shared {
  volatile pid_t alive;       // CLONE_CHILD_CLEARTID: 0 once it exec'd or exited
  volatile int joined;        // 0 joining, 1 joined, < 0: -errno of the failed write
  volatile int taken;         // it took the job (run)
  volatile int joins_closing;  // it closes (or closed) join_fds itself
  volatile int go_closing;     // it closes (or closed) go_fd itself
  pid_t parent;
  int go_fd;
  int join_count;
  int join_fds[kMaxJoin];
  int reset_count;
  int reset_list[NSIG];
  void (*child)(void*);
  void* arg;
};

// What the reaper's callback and the owner share: the mapping goes when
// both are done with it (the launcher reaped, the owner gone).
struct Launcher::Mapping {
  void* base = nullptr;  // a pty/vm_child stack
  bool reaped = false;
  bool owner_gone = false;
  // The launcher is gone: what it left open of its own goes.
  void close_what_it_left() {
    if (!base) return;
    auto* s = static_cast<Launcher::Shared*>(base);
    if (!__atomic_load_n(&s->joins_closing, __ATOMIC_ACQUIRE))
      for (int i = 0; i < s->join_count; ++i) close(s->join_fds[i]);
    if (!__atomic_load_n(&s->go_closing, __ATOMIC_ACQUIRE)) close(s->go_fd);
    s->joins_closing = 1;
    s->go_closing = 1;
  }
  void release();
};

namespace {

struct RawSigaction {
  void* handler;
  unsigned long flags;
  void* restorer;
  uint64_t mask;
};

__attribute__((no_sanitize_address)) int launcher_main(void* p) {
  auto* s = static_cast<Launcher::Shared*>(p);
  // Not a survivor of execd (the shared descriptor table keeps the go pipe
  // open, so end-of-file would never come): cleared again before a command
  // execs, which outlives execd as any command does.
  raw_syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL);
  if (raw_syscall(SYS_getppid) != s->parent) return 0;
  const RawSigaction dfl{reinterpret_cast<void*>(SIG_DFL), 0, nullptr, 0};
  for (int i = 0; i < s->reset_count; ++i)
    raw_syscall(SYS_rt_sigaction, s->reset_list[i], reinterpret_cast<long>(&dfl), 0, 8);
  static const char kName[16] = "execd-spare";
  raw_syscall(SYS_prctl, PR_SET_NAME, reinterpret_cast<long>(kName));
  int joined = 1;
  for (int i = 0; i < s->join_count; ++i) {
    long r = raw_syscall(SYS_write, s->join_fds[i], reinterpret_cast<long>("0"), 1);
    if (r != 1) {
      joined = r < 0 ? static_cast<int>(r) : -EIO;
      break;
    }
  }
  __atomic_store_n(&s->joined, joined, __ATOMIC_RELEASE);
  raw_syscall(SYS_futex, reinterpret_cast<long>(&s->joined), FUTEX_WAKE, 1);  // wait_joined
  __atomic_store_n(&s->joins_closing, 1, __ATOMIC_RELEASE);
  for (int i = 0; i < s->join_count; ++i) raw_syscall(SYS_close, s->join_fds[i]);
  char b = 0;
  long r = 0;
  if (joined == 1) {
    do {
      r = raw_syscall(SYS_read, s->go_fd, reinterpret_cast<long>(&b), 1);
    } while (r == -EINTR);
  }
  if (r != 1) {  // retired, or of no use
    __atomic_store_n(&s->go_closing, 1, __ATOMIC_RELEASE);
    raw_syscall(SYS_close, s->go_fd);
    return joined == 1 ? 0 : 1;
  }
  // From here the loop thread waits (run): the child procedure may use libc
  // as a vfork child does. Its own descriptor table first, for the dup2s.
  if (raw_syscall(SYS_unshare, CLONE_FILES) != 0) return 127;
  raw_syscall(SYS_prctl, PR_SET_PDEATHSIG, 0);
  __atomic_store_n(&s->taken, 1, __ATOMIC_RELEASE);
  s->child(s->arg);
  return 127;
}

}  // namespace

void Launcher::Mapping::release() {
  if (base) give_back_vm_stack(base);
  base = nullptr;
}

std::unique_ptr<Launcher> Launcher::start(Reaper& reaper, const std::vector<int>& join_fds,
                                          const int* reset_signals, int reset_count, std::string& error) {
  if (!kSupported) {
    error = "no launcher on this architecture";
    return nullptr;
  }
  if (join_fds.size() > kMaxJoin) {
    error = "too many hierarchies for a launcher";
    return nullptr;
  }
  void* base = take_vm_stack(error);
  if (!base) return nullptr;
  auto mapping = std::make_shared<Mapping>();
  mapping->base = base;
  auto* low = static_cast<char*>(base);
  auto* s = new (low) Shared{};
  std::unique_ptr<Launcher> l(new Launcher);
  l->reaper_ = &reaper;
  l->shared_ = s;
  int go[2];
  if (pipe2(go, O_CLOEXEC) != 0) {
    error = std::string("pipe: ") + strerror(errno);
    mapping->release();
    l->shared_ = nullptr;
    return nullptr;
  }
  l->go_write_ = go[1];
  s->alive = 1;
  s->parent = getpid();
  s->go_fd = go[0];
  for (int fd : join_fds) {
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0) {
      error = std::string("dup: ") + strerror(errno);
      for (int i = 0; i < s->join_count; ++i) close(s->join_fds[i]);
      close(go[0]);
      close(go[1]);
      l->go_write_ = -1;
      mapping->release();
      l->shared_ = nullptr;
      return nullptr;
    }
    s->join_fds[s->join_count++] = own;
  }
  s->reset_count = reset_count < NSIG ? reset_count : NSIG;
  for (int i = 0; i < s->reset_count; ++i) s->reset_list[i] = reset_signals[i];

  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  char* top = low + kVmStackBytes;
  pid_t pid = clone(launcher_main, top, CLONE_VM | CLONE_FILES | CLONE_CHILD_CLEARTID | SIGCHLD, s, nullptr, nullptr,
                    &s->alive);
  int e = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) {
    error = std::string("clone: ") + strerror(e);
    s->alive = 0;
    mapping->close_what_it_left();
    close(go[1]);
    l->go_write_ = -1;
    mapping->release();
    l->shared_ = nullptr;
    return nullptr;
  }
  l->pid_ = pid;
  l->mapping_ = mapping;
  reaper.watch(pid, [mapping](const ExitInfo&) {
    mapping->reaped = true;
    mapping->close_what_it_left();
    if (mapping->owner_gone) mapping->release();
  });
  return l;
}

Launcher::~Launcher() {
  if (go_write_ >= 0) close(go_write_);  // an idle launcher reads end-of-file
  if (!mapping_ || !mapping_->base) return;
  auto* s = static_cast<Shared*>(mapping_->base);
  if (mapping_->reaped || __atomic_load_n(&s->alive, __ATOMIC_ACQUIRE) == 0) {
    mapping_->close_what_it_left();
    mapping_->release();
  } else {
    mapping_->owner_gone = true;  // the reaper's callback frees it
  }
}

namespace {

constexpr int kSliceMs = 10;

// Waits while *word == value, in slices of kSliceMs, up to `ms`, giving up
// early when give_up() says so; true if it changed.
template <class GiveUp>
bool wait_while(volatile int* word, int value, int ms, GiveUp give_up) {
  for (int waited = 0; __atomic_load_n(word, __ATOMIC_ACQUIRE) == value; waited += kSliceMs) {
    if (waited >= ms || give_up()) return false;
    struct timespec slice = {0, kSliceMs * 1000 * 1000};
    syscall(SYS_futex, word, FUTEX_WAIT, value, &slice, nullptr, 0);
  }
  return true;
}

}  // namespace

bool Launcher::wait_joined(int ms) {
  if (!shared_ || used_) return false;
  // (the futex word is woken at the join; a launcher killed meanwhile never
  // stores it, so alive is checked at every slice)
  Shared* s = shared_;
  wait_while(&s->joined, 0, ms, [s] { return __atomic_load_n(&s->alive, __ATOMIC_ACQUIRE) == 0; });
  return joined() && !failed();
}

void Launcher::retire() {
  if (go_write_ >= 0) close(go_write_);
  go_write_ = -1;
  used_ = true;
}

bool Launcher::wait_gone(int ms) {
  if (!mapping_ || !mapping_->base) return true;
  auto* s = static_cast<Shared*>(mapping_->base);
  pid_t v = __atomic_load_n(&s->alive, __ATOMIC_ACQUIRE);
  return v == 0 || wait_while(reinterpret_cast<volatile int*>(&s->alive), v, ms, [] { return false; });
}

bool Launcher::joined() const { return shared_ && !used_ && __atomic_load_n(&shared_->joined, __ATOMIC_ACQUIRE) == 1; }

bool Launcher::failed() const {
  if (!shared_ || used_) return true;
  return __atomic_load_n(&shared_->joined, __ATOMIC_ACQUIRE) < 0 || __atomic_load_n(&shared_->alive, __ATOMIC_ACQUIRE) == 0;
}

bool Launcher::run(void (*child)(void*), void* arg) {
  if (failed()) return false;
  Shared* s = shared_;
  s->child = child;
  s->arg = arg;
  s->taken = 0;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  char b = 1;
  ssize_t w = write(go_write_, &b, 1);
  if (w == 1) {
    pid_t v;
    while ((v = __atomic_load_n(&s->alive, __ATOMIC_ACQUIRE)) != 0)
      syscall(SYS_futex, &s->alive, FUTEX_WAIT, v, nullptr, nullptr, 0);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  used_ = true;
  if (w != 1 || !__atomic_load_n(&s->taken, __ATOMIC_ACQUIRE)) return false;
  // The child set its own score, and with it execd's (one per mm).
  restore_daemon_oom_score_adj();
  reaper_->unwatch(pid_);  // the caller's now
  mapping_->close_what_it_left();  // past its exec (or exit): the shared table is execd's alone
  shared_ = nullptr;
  mapping_->release();  // it left the mapping at its exec or exit
  close(go_write_);
  go_write_ = -1;
  return true;
}

}  // namespace execd::pty
