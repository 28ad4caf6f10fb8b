// pty/vm_child: see header.
#include "pty/vm_child.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sanitizer/asan_interface.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

namespace execd::pty {

int64_t monotonic_ms() {
  struct timespec ts {};
  raw_syscall(SYS_clock_gettime, CLOCK_MONOTONIC, reinterpret_cast<long>(&ts));
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

namespace {

// Builds /proc paths and reads them with raw system calls only: these run
// where no libc call may write errno (a CLONE_VM child's wait).
char* put_decimal(char* at, unsigned v) {
  char digits[16];
  int n = 0;
  do digits[n++] = static_cast<char>('0' + v % 10);
  while (v /= 10);
  while (n) *at++ = digits[--n];
  return at;
}

char* put_text(char* at, const char* text) {
  while (*text) *at++ = *text++;
  *at = 0;
  return at;
}

long read_small(const char* path, char* buf, size_t size) {
  long fd = raw_syscall(SYS_openat, AT_FDCWD, reinterpret_cast<long>(path), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  long got = raw_syscall(SYS_read, fd, reinterpret_cast<long>(buf), size);
  raw_syscall(SYS_close, fd);
  return got;
}

}  // namespace

char process_state(pid_t pid) {
  char path[32];
  put_text(put_decimal(put_text(path, "/proc/"), static_cast<unsigned>(pid)), "/stat");
  char buf[512];
  long got = read_small(path, buf, sizeof buf - 1);
  if (got <= 0) return 0;
  // "pid (comm) S ...": the comm may hold ')' itself, so the last one.
  const char* close_paren = nullptr;
  for (long i = 0; i < got; ++i)
    if (buf[i] == ')') close_paren = buf + i;
  if (!close_paren || close_paren + 2 >= buf + got) return 0;
  return close_paren[2];
}

void futex_wait_ms(const volatile int* word, int value, int ms) {
  if (ms <= 0) return;
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  raw_syscall(SYS_futex, reinterpret_cast<long>(word), FUTEX_WAIT, value, reinterpret_cast<long>(&t));
}

namespace {

bool stopped_or_traced(char state) { return state == 'T' || state == 't'; }

// The children of `pid` that are stopped or traced, SIGKILLed; whether there
// were any. A child that waits for its own vfork child (a keeper starting
// its command, pty/keeper) sleeps in the kernel while that one is held, so
// the hold shows on the grandchild, not on the process the loop waits for.
// Raw system calls only, as in process_state.
bool kill_stopped_children(pid_t pid) {
  char path[64];
  char* at = put_decimal(put_text(path, "/proc/"), static_cast<unsigned>(pid));
  put_text(put_decimal(put_text(at, "/task/"), static_cast<unsigned>(pid)), "/children");
  char buf[256];
  long got = read_small(path, buf, sizeof buf - 1);
  if (got < 0) return false;
  bool any = false;
  long child = 0;
  for (long i = 0; i <= got; ++i) {
    if (i < got && buf[i] >= '0' && buf[i] <= '9') {
      child = child * 10 + (buf[i] - '0');
      continue;
    }
    if (child > 0 && stopped_or_traced(process_state(static_cast<pid_t>(child)))) {
      raw_syscall(SYS_kill, child, SIGKILL);
      any = true;
    }
    child = 0;
  }
  return any;
}

}  // namespace

bool kill_and_wait_gone(pid_t pid, const volatile int* word) {
  // Only children not reaped yet come here (the loop reaps, and it is here):
  // the pid is still this process.
  raw_syscall(SYS_kill, pid, SIGKILL);
  const int64_t start = monotonic_ms();
  for (int v; (v = __atomic_load_n(word, __ATOMIC_ACQUIRE)) != 0;) {
    // With SIGKILL pending, a process that is anywhere but R is in the
    // kernel and never returns to user space (the kill woke it from any
    // stop; a tracer may hold it at its exit, t, for as long as it likes).
    // R may be user space still, for as long as the kill's interrupt takes
    // to reach its CPU: that one is waited for, until it is out of the
    // memory (its word is 0).
    char st = process_state(pid);
    if (st != 'R') return false;
    if (monotonic_ms() - start >= kGoneCapMs) return false;
    futex_wait_ms(word, v, 1);
  }
  return true;
}

bool wait_for_exec(const volatile int* word, pid_t pid, GiveUp& why) {
  int v = __atomic_load_n(word, __ATOMIC_ACQUIRE);
  if (v == 0) return true;
  const int64_t start = monotonic_ms();
  int64_t next_look = start + kHandOverLookMs;
  for (;;) {
    v = __atomic_load_n(word, __ATOMIC_ACQUIRE);
    if (v == 0) return true;
    int64_t now = monotonic_ms();
    if (now < next_look) {
      futex_wait_ms(word, v, static_cast<int>(next_look - now));
      continue;
    }
    char st = process_state(pid);
    if (!stopped_or_traced(st) && kill_stopped_children(pid)) st = 't';
    if (stopped_or_traced(st) || now - start >= kHandOverCapMs) {
      why.state = st;
      why.waited_ms = static_cast<int>(now - start);
      kill_and_wait_gone(pid, word);
      return false;
    }
    next_look = now + kHandOverLookMs;
  }
}

std::string GiveUp::describe(const char* before) const {
  const char* what = stopped_or_traced(state) ? (state == 't' ? "traced" : "stopped") : "too slow";
  char line[160];
  snprintf(line, sizeof line, "%s (state %c) before %s; killed after %d ms", what, state ? state : '?', before,
           waited_ms);
  return line;
}

// ---------------------------------------------------------------------------
// Stacks

namespace {

constexpr size_t kVmGuardBytes = 4096;
constexpr size_t kKeptVmStacks = 4;
void* kept_vm_stacks[kKeptVmStacks];
size_t kept_vm_stack_count = 0;

struct DrainingStack {
  void* base;
  const volatile int* word;
};
std::vector<DrainingStack> draining_vm_stacks;

void keep_or_unmap(void* base) {
  // Under ASan: the child's frames (instrumented code that exec'd and never
  // returned) left their redzones poisoned in the stack's shadow, and this
  // ASan clears that neither at munmap nor at a later mmap of the same
  // addresses: a cold-records slab mapped there faulted on its first write.
  ASAN_UNPOISON_MEMORY_REGION(base, kVmStackBytes);
  if (kept_vm_stack_count < kKeptVmStacks) kept_vm_stacks[kept_vm_stack_count++] = base;
  else munmap(base, kVmStackBytes);
}

// Stacks whose last process has let go of them since they were given back.
void drain_vm_stacks() {
  for (size_t i = 0; i < draining_vm_stacks.size();) {
    if (__atomic_load_n(draining_vm_stacks[i].word, __ATOMIC_ACQUIRE) == 0) {
      keep_or_unmap(draining_vm_stacks[i].base);
      draining_vm_stacks[i] = draining_vm_stacks.back();
      draining_vm_stacks.pop_back();
    } else {
      ++i;
    }
  }
}

}  // namespace

void* take_vm_stack(std::string& error) {
  if (!draining_vm_stacks.empty()) drain_vm_stacks();
  if (kept_vm_stack_count) return kept_vm_stacks[--kept_vm_stack_count];
  void* base = mmap(nullptr, kVmStackBytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (base == MAP_FAILED) {
    error = std::string("mmap: ") + strerror(errno);
    return nullptr;
  }
  // A guard page between the shared words and the stack above them.
  mprotect(static_cast<char*>(base) + kVmWordsBytes, kVmGuardBytes, PROT_NONE);
  return base;
}

std::vector<void*> kept_vm_stacks_now() {
  return std::vector<void*>(kept_vm_stacks, kept_vm_stacks + kept_vm_stack_count);
}

void give_back_vm_stack(void* base, const volatile int* pending) {
  if (!base) return;
  if (pending && __atomic_load_n(pending, __ATOMIC_ACQUIRE) != 0) draining_vm_stacks.push_back({base, pending});
  else keep_or_unmap(base);
  if (!draining_vm_stacks.empty()) drain_vm_stacks();
}

// ---------------------------------------------------------------------------
// The child

namespace {

// At the low end of the child's stack mapping.
struct VmChildWords {
  volatile int alive;  // CLONE_CHILD_CLEARTID: 0 once it exec'd or exited
  void (*fn)(void*);
  void* arg;
};

int vm_child_main(void* p) {
  auto* w = static_cast<VmChildWords*>(p);
  w->fn(w->arg);
  return 127;
}

#if defined(__x86_64__)
struct Clone3Args {  // struct clone_args, version 2 (88 bytes)
  uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup;
};
constexpr uint64_t kCloneIntoCgroup = 0x200000000ULL;

extern "C" long execd_clone3_run(Clone3Args* args, size_t size, void (*fn)(void*), void* arg);
// The child has the parent's registers but rsp (the new stack's top) and
// rax (0): fn and arg ride in r8 and r9, which the syscall keeps.
asm(R"(
  .text
  .globl execd_clone3_run
  .type execd_clone3_run, @function
execd_clone3_run:
  mov %rdx, %r8
  mov %rcx, %r9
  mov $435, %eax
  syscall
  test %rax, %rax
  jnz 1f
  xor %ebp, %ebp
  mov %r9, %rdi
  call *%r8
  mov $127, %edi
  mov $231, %eax
  syscall
  hlt
1:
  ret
  .size execd_clone3_run, .-execd_clone3_run
)");

long clone3_child(void* base, VmChildWords* w, int cgroup_fd) {
  Clone3Args a{};
  a.flags = CLONE_VM | CLONE_CHILD_CLEARTID | (cgroup_fd >= 0 ? kCloneIntoCgroup : 0);
  a.child_tid = reinterpret_cast<uint64_t>(&w->alive);
  a.exit_signal = SIGCHLD;
  a.stack = reinterpret_cast<uint64_t>(static_cast<char*>(base) + kVmWordsBytes + kVmGuardBytes);
  a.stack_size = kVmStackBytes - kVmWordsBytes - kVmGuardBytes;
  if (cgroup_fd >= 0) a.cgroup = static_cast<uint64_t>(cgroup_fd);
  return execd_clone3_run(&a, sizeof a, w->fn, w->arg);
}
#else
long clone3_child(void*, VmChildWords*, int) { return -ENOSYS; }
#endif

}  // namespace

VmChild run_vm_child(void (*fn)(void*), void* arg, int cgroup_fd, bool use_clone3) {
  VmChild r;
  std::string ignored;
  void* base = take_vm_stack(ignored);
  if (!base) {
    r.error = errno ? errno : ENOMEM;
    return r;
  }
  auto* w = new (base) VmChildWords{1, fn, arg};
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  long pid;
  if (cgroup_fd >= 0 || use_clone3) {
    pid = clone3_child(base, w, cgroup_fd);
  } else {
    pid = clone(vm_child_main, static_cast<char*>(base) + kVmStackBytes, CLONE_VM | CLONE_CHILD_CLEARTID | SIGCHLD,
                w, nullptr, nullptr, &w->alive);
    if (pid < 0) pid = -errno;  // nothing runs beside us: errno is ours
  }
  if (pid < 0) {
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    r.error = static_cast<int>(-pid);
    w->alive = 0;
    give_back_vm_stack(base);
    return r;
  }
  r.pid = static_cast<pid_t>(pid);
  wait_for_exec(&w->alive, r.pid, r.gave_up);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  give_back_vm_stack(base, &w->alive);
  return r;
}

// ---------------------------------------------------------------------------
// oom_score_adj

namespace {
int daemon_oom_score_adj = 0;
// Kept open: a /proc/self path walk and a close less on every start.
int daemon_oom_score_fd = -1;
}  // namespace

void remember_daemon_oom_score_adj() {
  if (daemon_oom_score_fd >= 0) return;
  int fd = open("/proc/self/oom_score_adj", O_RDWR | O_CLOEXEC);
  if (fd < 0) return;
  char v[16] = {0};
  ssize_t n = pread(fd, v, sizeof v - 1, 0);
  if (n <= 0) {
    close(fd);
    return;
  }
  daemon_oom_score_adj = atoi(v);
  daemon_oom_score_fd = fd;
}

void restore_daemon_oom_score_adj() {
  if (daemon_oom_score_fd < 0) return;
  char v[16];
  int n = snprintf(v, sizeof v, "%d", daemon_oom_score_adj);
  if (pwrite(daemon_oom_score_fd, v, static_cast<size_t>(n), 0) < 0) {
    // best effort: execd keeps the children's score until the next one
  }
}

}  // namespace execd::pty
