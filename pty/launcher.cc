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
// Launcher::Shared::child_alive before the command's process exists (its
// CLONE_CHILD_CLEARTID makes it 0 at the exec).
constexpr int kUnborn = -1;

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
  volatile pid_t alive;       // CLONE_CHILD_CLEARTID: 0 once it exited
  volatile int joined;        // 0 joining, 1 joined, < 0: -errno of the failed write
  volatile int joins_closing;  // it closes (or closed) join_fds itself
  volatile int go_closing;     // it closes (or closed) go_fd itself
  // The command's process (run): its pid (CLONE_PARENT_SETTID, written
  // before the launcher returns from the clone), its CLONE_CHILD_CLEARTID
  // word (kUnborn until then; 0 once it exec'd or exited; the word the loop
  // waits on), and the launcher's clone's -errno if it failed.
  volatile pid_t child_tid;
  volatile int child_alive;
  volatile int clone_error;
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

// The clone of the command's process: CLONE_VFORK with no stack of its own,
// so it runs on ours (as a vfork child does) while we wait in the kernel;
// CLONE_PARENT: execd's child, not ours (reaped there, and it does not go
// with us); born in our cgroup. The exit signal is ours (SIGCHLD).
constexpr long kCommandClone =
    CLONE_VM | CLONE_VFORK | CLONE_PARENT | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD;

__attribute__((no_sanitize_address)) int launcher_main(void* p) {
  auto* s = static_cast<Launcher::Shared*>(p);
  // Not a survivor of execd (the shared descriptor table keeps the go pipe
  // open, so end-of-file would never come). The command's process does not
  // inherit it: it outlives execd as any command does.
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
  // Busy: a `pkill execd-spare` that read the old name and kills this pid
  // now can only kill this launcher (the command started another way, or
  // unharmed if it exists already); and the command's process, which
  // starts with our name, never bears the spare's.
  static const char kBusyName[16] = "execd-start";
  raw_syscall(SYS_prctl, PR_SET_NAME, reinterpret_cast<long>(kBusyName));
#if defined(__x86_64__)  // clone(flags, stack, parent_tid, child_tid, tls)
  long pid = raw_syscall(SYS_clone, kCommandClone, 0, reinterpret_cast<long>(&s->child_tid),
                         reinterpret_cast<long>(&s->child_alive), 0);
#else  // aarch64: clone(flags, stack, parent_tid, tls, child_tid)
  long pid = raw_syscall(SYS_clone, kCommandClone, 0, reinterpret_cast<long>(&s->child_tid), 0,
                         reinterpret_cast<long>(&s->child_alive));
#endif
  if (pid == 0) {
    // The command's process, on our stack below our frame while we wait
    // in the kernel: the child procedure may use libc as a vfork child
    // does (the loop thread waits with raw system calls only).
    s->child(s->arg);
    raw_syscall(SYS_exit, 127);
  }
  if (pid < 0) {
    __atomic_store_n(&s->clone_error, static_cast<int>(pid), __ATOMIC_RELEASE);
    raw_syscall(SYS_futex, reinterpret_cast<long>(&s->child_alive), FUTEX_WAKE, 1);
  }
  return 0;
}

}  // namespace

void Launcher::Mapping::release() {
  if (!base) return;
  // The launcher is gone (reaped, or out of the memory): whatever it
  // cloned, the kernel wrote its pid before the launcher could get that
  // far. The command's process ran on this stack: one given up on may not
  // have left it yet (its word is not 0), and the stack waits for it.
  auto* s = static_cast<Launcher::Shared*>(base);
  give_back_vm_stack(base, __atomic_load_n(&s->child_tid, __ATOMIC_ACQUIRE) ? &s->child_alive : nullptr);
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

// Waits while *word == value, in slices of kHandOverLookMs, up to `ms`,
// giving up early when give_up() says so; true if it changed.
template <class Stop>
bool wait_while(const volatile int* word, int value, int ms, Stop give_up) {
  for (int waited = 0; __atomic_load_n(word, __ATOMIC_ACQUIRE) == value; waited += kHandOverLookMs) {
    if (waited >= ms || give_up()) return false;
    futex_wait_ms(word, value, kHandOverLookMs);
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
  return v == 0 || wait_while(reinterpret_cast<const volatile int*>(&s->alive), v, ms, [] { return false; });
}

void Launcher::kill() {
  used_ = true;
  if (pid_ > 0 && mapping_ && !mapping_->reaped) ::kill(pid_, SIGKILL);
}

bool Launcher::reaped() const { return !mapping_ || mapping_->reaped; }

std::shared_ptr<const bool> Launcher::reaped_flag() const {
  if (!mapping_) return std::make_shared<const bool>(true);
  return std::shared_ptr<const bool>(mapping_, &mapping_->reaped);
}

bool Launcher::joined() const { return shared_ && !used_ && __atomic_load_n(&shared_->joined, __ATOMIC_ACQUIRE) == 1; }

bool Launcher::failed() const {
  if (!shared_ || used_) return true;
  return __atomic_load_n(&shared_->joined, __ATOMIC_ACQUIRE) < 0 || __atomic_load_n(&shared_->alive, __ATOMIC_ACQUIRE) == 0;
}

pid_t Launcher::run(void (*child)(void*), void* arg, GiveUp& why) {
  if (failed()) return -1;
  Shared* s = shared_;
  s->child = child;
  s->arg = arg;
  s->child_tid = 0;
  s->clone_error = 0;
  __atomic_store_n(&s->child_alive, kUnborn, __ATOMIC_RELEASE);
  // From the write on, the command's process may run beside this thread on
  // its thread-local storage: raw system calls, and no signal handler.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  char b = 1;
  bool woken = raw_syscall(SYS_write, go_write_, reinterpret_cast<long>(&b), 1) == 1;
  pid_t pid = woken ? hand_over(why) : -1;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  used_ = true;
  // Past its read (it never touches the go pipe again), or killed: what it
  // left open of the shared table is execd's to close. (Not woken: still
  // idle in its read, it reads end-of-file below and exits; what it leaves
  // is closed when it is reaped.)
  if (woken) mapping_->close_what_it_left();
  close(go_write_);
  go_write_ = -1;
  return pid;
}

pid_t Launcher::hand_over(GiveUp& why) {
  Shared* s = shared_;
  const int64_t start = monotonic_ms();
  int64_t next_look = start + kHandOverLookMs;
  for (;;) {
    int v = __atomic_load_n(&s->child_alive, __ATOMIC_ACQUIRE);
    if (v == 0) return __atomic_load_n(&s->child_tid, __ATOMIC_ACQUIRE);  // exec'd or exited
    if (v == kUnborn) {
      // Gone, or its clone failed, before there was a command's process:
      // nothing ran. (The kernel writes child_tid before the launcher is
      // back from its clone, so it is read after alive.)
      bool gone = __atomic_load_n(&s->alive, __ATOMIC_ACQUIRE) == 0;
      bool refused = __atomic_load_n(&s->clone_error, __ATOMIC_ACQUIRE) != 0;
      if ((gone || refused) && __atomic_load_n(&s->child_tid, __ATOMIC_ACQUIRE) == 0) return -1;
    }
    int64_t now = monotonic_ms();
    if (now < next_look) {
      // Woken by the command's exec (or exit), or by a failed clone; a
      // launcher that dies first is seen at the next look.
      futex_wait_ms(&s->child_alive, v, static_cast<int>(next_look - now));
      continue;
    }
    // The command's process once there is one, else the launcher (which
    // is in its vfork wait, 'D', while the command's process runs).
    pid_t c = __atomic_load_n(&s->child_tid, __ATOMIC_ACQUIRE);
    char st = process_state(c > 0 ? c : pid_);
    if (st == 'T' || st == 't' || now - start >= kHandOverCapMs) {
      why.state = st;
      why.waited_ms = static_cast<int>(now - start);
      break;
    }
    next_look = now + kHandOverLookMs;
  }
  // Given up on: the launcher first, so that no command's process can come
  // after (once it is out of the memory, or held at its exit by a tracer,
  // it is past any clone it was in); then the one it made, if it made one.
  kill_and_wait_gone(pid_, &s->alive);
  pid_t c = __atomic_load_n(&s->child_tid, __ATOMIC_ACQUIRE);
  if (c > 0) kill_and_wait_gone(c, &s->child_alive);
  return -1;
}

}  // namespace execd::pty
