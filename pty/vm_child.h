// pty/vm_child: a process that shares execd's memory until it execs, as a
// vfork child does, without the loop thread waiting for it with no deadline.
//
// vfork (and clone3 with CLONE_VFORK) stops the parent in the kernel until
// the child execs or exits, however long that takes: a child stopped by
// SIGSTOP (a root process of the sandbox racing new pids, a debugger, a
// stray `pkill -STOP`) stopped execd's loop with it, and every connection.
// Here the child is cloned with CLONE_VM | CLONE_CHILD_CLEARTID on a stack
// of its own, and the loop thread waits on the futex word the kernel clears
// (and wakes) when the child lets go of the shared memory, at its exec or its
// exit. The wait is bounded (see the constants below and
// docs/containment.md): it looks at the child's state every kHandOverLookMs; a
// stopped or traced child (T or t) is given up on at the first look, one that
// runs or sleeps in the kernel at kHandOverCapMs. A child given up on is
// SIGKILLed, and the wait goes on (bounded) until it has left the memory.
//
// Rules that follow from the sharing:
// - The child runs on the loop thread's thread-local storage (errno, libc's
//   and the sanitizers' state): until it is gone from the memory, the loop
//   thread makes raw system calls only (raw_syscall: no errno), with every
//   signal blocked (no handler of ours may run beside it, nor in the child
//   before it has reset the dispositions).
// - Its stack is kept until it cannot run on it any more: given back with
//   the word still set, a stack waits (give_back_vm_stack) for the word.
// - The kernel gives every process that shares an mm one oom_score_adj,
//   unless the writer is a vfork child: a CLONE_VM child that sets its own
//   sets execd's too, which restore_daemon_oom_score_adj() puts back.
#pragma once

#include <sys/types.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace execd::pty {

// A system call that touches neither errno nor anything else of libc's.
// Inline always: a vfork-style child (pty/launcher) continues on its
// parent's stack right after one, and must not return from a frame.
__attribute__((always_inline)) inline long raw_syscall(long n, long a = 0, long b = 0, long c = 0, long d = 0,
                                                      long e = 0) {
#if defined(__x86_64__)
  long ret;
  register long r10 __asm__("r10") = d;
  register long r8 __asm__("r8") = e;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
                   : "rcx", "r11", "memory");
  return ret;
#elif defined(__aarch64__)
  register long x8 __asm__("x8") = n;
  register long x0 __asm__("x0") = a;
  register long x1 __asm__("x1") = b;
  register long x2 __asm__("x2") = c;
  register long x3 __asm__("x3") = d;
  register long x4 __asm__("x4") = e;
  __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4) : "memory", "cc");
  return x0;
#else
  (void)n, (void)a, (void)b, (void)c, (void)d, (void)e;
  return -ENOSYS;
#endif
}

// The bounds of every wait for a child on execd's memory (a launcher's
// hand-over included). A look costs an open, a read and a close of
// /proc/PID/stat (tens of microseconds), and a child that execs in time
// (well under a millisecond) is never looked at; a slow one that runs is
// looked at, never killed, until the cap. kHandOverLookMs keeps a /ping
// that comes while a stopped child is waited for well under 100 ms (the
// look, the kill, the start another way: 10-40 ms on two busy cores); the
// cap is for children that are not stopped but slow: on two cores shared
// by three sanitized daemons a runnable child can wait for a CPU that long.
constexpr int kHandOverLookMs = 5;
constexpr int kHandOverCapMs = 1000;
// After the SIGKILL, for a child that was running: until it is out of the
// memory (it never returns to user space once the kill reaches it; the wait
// is for that, and for a CPU).
constexpr int kGoneCapMs = 1000;

// CLOCK_MONOTONIC in ms (vDSO; nothing written on success).
int64_t monotonic_ms();
// The state letter of /proc/PID/stat ('R', 'S', 'D', 'T', 't', 'Z', ...),
// or 0 if it cannot be read (gone). Raw system calls only.
char process_state(pid_t pid);
// Sleeps while *word == value, up to `ms` (a shared futex: the kernel's
// CLONE_CHILD_CLEARTID wake is one). Raw.
void futex_wait_ms(const volatile int* word, int value, int ms);
// SIGKILL to `pid`, then waits (bounded by kGoneCapMs) until `word` (its
// CLONE_CHILD_CLEARTID word) is 0, or it is seen in the kernel for good (any
// state but R once the kill is pending). True if it is out of the memory;
// false: its stack must wait for the word. Raw.
bool kill_and_wait_gone(pid_t pid, const volatile int* word);

// Why a wait gave up on a child, for the caller's message and counters.
struct GiveUp {
  char state = 0;      // its state at the last look ('T', 't', 'R', ...; 0: gone)
  int waited_ms = 0;
  bool happened() const { return waited_ms > 0 || state != 0; }
  // "stopped (state T) before its exec; killed after 11 ms"
  std::string describe(const char* before = "its exec") const;
};

// Waits until *word is 0 (the child `pid` exec'd or exited); on a stopped
// or traced child (or at the cap) gives up: kills it and fills `why`. True
// if it let go of the memory by itself. Raw system calls only.
bool wait_for_exec(const volatile int* word, pid_t pid, GiveUp& why);

// Stacks for such children: kVmStackBytes, a page of words both sides
// share at the low end, a guard page, the stack above. Kept for the next
// child (an mmap, an mprotect and the first page faults less per start).
// Loop thread only.
constexpr size_t kVmStackBytes = 256 * 1024;
constexpr size_t kVmWordsBytes = 4096;
void* take_vm_stack(std::string& error);
// `pending`: a CLONE_CHILD_CLEARTID word (inside this stack) of a process
// that may still run on it; the stack serves again once the word is 0.
void give_back_vm_stack(void* base, const volatile int* pending = nullptr);
// The stacks kept for the next child now (tests).
std::vector<void*> kept_vm_stacks_now();

// Runs fn(arg) in a new process (CLONE_VM | CLONE_CHILD_CLEARTID, exit
// signal SIGCHLD: reaped by pty::Reaper) on a stack of its own, every
// signal blocked around it, and waits, bounded, until it has exec'd or
// exited. fn execs or _exits (a return exits 127). With `cgroup_fd` >= 0
// the child is born in that cgroup (clone3 CLONE_INTO_CGROUP, x86-64);
// `use_clone3` without one: clone3 all the same (tests).
struct VmChild {
  pid_t pid = -1;  // > 0: it exec'd or exited (or was given up on)
  int error = 0;   // the clone failed (an errno): nothing ran
  GiveUp gave_up;  // happened(): it was stopped, traced or too slow, and is killed
};
VmChild run_vm_child(void (*fn)(void*), void* arg, int cgroup_fd = -1, bool use_clone3 = false);

// execd's own oom_score_adj, read once at start-up; put back after a CLONE_VM
// child that is no vfork child set its own.
void remember_daemon_oom_score_adj();
void restore_daemon_oom_score_adj();

}  // namespace execd::pty
