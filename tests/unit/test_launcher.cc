// pty/launcher and pty/vm_child against the real kernel: a launcher starts
// the process it is given as a new child of ours (a pid of its own, exit
// status through the reaper) and exits; one killed before it is used reports
// so and leaves no descriptor behind; a retired one exits. Every wait for a
// child on our memory is bounded: a stopped launcher, or a stopped child
// before its exec, is given up on within the bounds and killed; a launcher
// killed after it started the child takes no child with it; a child that is
// slow but running is waited for. Cgroup joins are covered by the
// integration tests (they need a cgroup). Under ASan, a used stack comes
// back with a clean shadow.
#include "pty/launcher.h"

#include <doctest/doctest.h>
#include <dirent.h>
#include <sanitizer/asan_interface.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/syscall.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "loop_scratch.h"
#include "pty/reaper.h"

using execd::pty::ExitInfo;
using execd::pty::GiveUp;
using execd::pty::Launcher;
using execd::pty::Reaper;
using execd::pty::VmChild;

namespace {

int open_fds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (readdir(d)) ++n;
  closedir(d);
  return n;
}

// What a child does before its exec, for the tests to steer: it says its
// pid, then (optionally) stops itself, waits for a byte, or runs a while.
struct Child {
  const char* path;
  int exit_code_if_exec_fails;
  bool stop_itself = false;
  int wait_fd = -1;     // >= 0: reads a byte from it first
  int busy_ms = 0;      // > 0: runs (no sleep) this long first
  volatile pid_t started = 0;
  volatile bool ran = false;
};

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void exec_child(void* p) {
  auto* c = static_cast<Child*>(p);
  c->ran = true;
  c->started = static_cast<pid_t>(syscall(SYS_getpid));
  if (c->stop_itself) kill(c->started, SIGSTOP);  // not blockable
  if (c->wait_fd >= 0) {
    char b;
    if (read(c->wait_fd, &b, 1) != 1) _exit(c->exit_code_if_exec_fails);
  }
  for (int64_t until = now_ms() + c->busy_ms; c->busy_ms > 0 && now_ms() < until;) {
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execl(c->path, c->path, "-c", "exit 7", static_cast<char*>(nullptr));
  _exit(c->exit_code_if_exec_fails);
}

// The state letter of a process ('Z' for a zombie), 0 if there is none.
char state_of(pid_t pid) { return execd::pty::process_state(pid); }

// The first poisoned byte of [base, base + bytes) in ASan's shadow.
void* poisoned_in(uintptr_t base, size_t bytes) {
#if defined(__SANITIZE_ADDRESS__)
  return __asan_region_is_poisoned(reinterpret_cast<void*>(base), bytes);
#else
  (void)base, (void)bytes;
  return nullptr;  // no shadow: the stacks' shape is still checked
#endif
}

// A loop, a started reaper, and the descriptors open before the test.
struct Rig {
  LoopScratch s;
  Reaper reaper{&s.loop};
  int fds_before = open_fds();
  Rig() { reaper.start(); }
  ~Rig() { reaper.stop(); }
  std::unique_ptr<Launcher> start(const std::vector<int>& join_fds = {}) {
    std::string error;
    auto l = Launcher::start(reaper, join_fds, nullptr, 0, error);
    REQUIRE_MESSAGE(l, error);
    return l;
  }
  // Waits (the loop running) until `pid` has been reaped through the reaper
  // (not a launcher's: the launcher watches its own).
  int reaped_status(pid_t pid) {
    int status = -1;
    bool done = false;
    reaper.watch(pid, [&](const ExitInfo& e) {
      status = e.wait_status;
      done = true;
    });
    s.run_until([&] {
      reaper.reap();
      return done;
    });
    return status;
  }
  // Reaps (the loop running) until the launcher has been collected.
  bool launcher_reaped(const Launcher& l) {
    s.run_until([&] {
      reaper.reap();
      return l.reaped();
    });
    return l.reaped();
  }
  // Reaps until the descriptors are back to where they were.
  bool no_descriptor_left() {
    s.run_until([&] {
      reaper.reap();
      return open_fds() == fds_before;
    });
    return open_fds() == fds_before;
  }
};

}  // namespace

TEST_CASE("a launcher starts the process it is given as a new child of ours, then exits, and leaves no descriptor") {
  Rig rig;
  auto l = rig.start();
  CHECK(l->wait_joined(1000));
  Child c{"/bin/sh", 127};
  GiveUp why;
  pid_t pid = l->run(exec_child, &c, why);
  REQUIRE(pid > 0);
  CHECK_FALSE(why.happened());
  // A fresh pid, ours (CLONE_PARENT): never the launcher's, which a kill
  // aimed at execd-spare could reach.
  CHECK(pid != l->pid());
  CHECK(c.started == pid);
  int status = rig.reaped_status(pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 7);
  CHECK(rig.launcher_reaped(*l));
  l.reset();
  CHECK(rig.no_descriptor_left());
}

TEST_CASE("a child that fails in a launcher exits 127 under a pid of its own") {
  Rig rig;
  auto l = rig.start();
  Child c{"/nonexistent/sh", 127};
  GiveUp why;
  pid_t pid = l->run(exec_child, &c, why);
  REQUIRE(pid > 0);
  CHECK(pid != l->pid());
  int status = rig.reaped_status(pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 127);
}

TEST_CASE("a launcher killed before it is used says so, and what it held is closed once it is reaped") {
  Rig rig;
  auto l = rig.start();
  REQUIRE(l->wait_joined(1000));
  kill(l->pid(), SIGKILL);
  CHECK(l->wait_gone(2000));
  CHECK(l->failed());
  Child c{"/bin/sh", 127};
  GiveUp why;
  CHECK(l->run(exec_child, &c, why) == -1);  // nothing ran: the caller starts the process another way
  CHECK_FALSE(c.ran);
  l.reset();
  CHECK(rig.no_descriptor_left());
}

TEST_CASE("a launcher killed after its job was handed over, before its clone, is noticed within a look") {
  // A launcher stopped in its read, killed once the job is written (so that
  // it dies without cloning): run() sees it gone at the next look.
  Rig rig;
  auto l = rig.start();
  REQUIRE(l->wait_joined(1000));
  pid_t spare = l->pid();
  kill(spare, SIGSTOP);
  REQUIRE(execd::pty::process_state(spare) != 0);
  std::thread killer([spare] {
    // Stopped: it cannot have read the job yet, whenever this comes.
    for (int i = 0; i < 1000 && state_of(spare) != 'T'; ++i) usleep(1000);
    kill(spare, SIGKILL);
  });
  Child c{"/bin/sh", 127};
  GiveUp why;
  int64_t t0 = now_ms();
  pid_t pid = l->run(exec_child, &c, why);
  int64_t took = now_ms() - t0;
  killer.join();
  CHECK(pid == -1);
  CHECK_FALSE(c.ran);
  CHECK(took < 500);
  CHECK(rig.launcher_reaped(*l));
  l.reset();
  CHECK(rig.no_descriptor_left());
}

TEST_CASE("a stopped launcher is given up on at the first look: killed, and nothing ran") {
  Rig rig;
  auto l = rig.start();
  REQUIRE(l->wait_joined(1000));
  kill(l->pid(), SIGSTOP);
  for (int i = 0; i < 1000 && state_of(l->pid()) != 'T'; ++i) usleep(1000);
  REQUIRE(state_of(l->pid()) == 'T');
  Child c{"/bin/sh", 127};
  GiveUp why;
  int64_t t0 = now_ms();
  pid_t pid = l->run(exec_child, &c, why);
  int64_t took = now_ms() - t0;
  CHECK(pid == -1);
  CHECK(why.happened());
  CHECK(why.state == 'T');
  CHECK_FALSE(c.ran);
  // The first look comes after kHandOverLookMs; the kill and the wait for
  // its exit are quick. Far below the cap for running children.
  CHECK(took < 200);
  CHECK(took < execd::pty::kHandOverCapMs);
  CHECK(rig.launcher_reaped(*l));
  l.reset();
  CHECK(rig.no_descriptor_left());
}

TEST_CASE("a command process stopped before its exec is given up on: it and its launcher are killed") {
  Rig rig;
  auto l = rig.start();
  REQUIRE(l->wait_joined(1000));
  Child c{"/bin/sh", 127};
  c.stop_itself = true;
  GiveUp why;
  int64_t t0 = now_ms();
  pid_t pid = l->run(exec_child, &c, why);
  int64_t took = now_ms() - t0;
  CHECK(pid == -1);
  CHECK(c.ran);
  REQUIRE(c.started > 0);
  CHECK(why.state == 'T');
  CHECK(took < 200);
  // Killed (it is ours to reap: CLONE_PARENT), and its launcher too.
  int status = rig.reaped_status(c.started);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  CHECK(rig.launcher_reaped(*l));
  l.reset();
  CHECK(rig.no_descriptor_left());
}

TEST_CASE("a launcher killed after it started the command's process takes no command with it") {
  // The command's process waits for a byte before its exec; meanwhile its
  // launcher (in its vfork wait) is killed, then the byte comes: the
  // command execs and exits 7 as if nothing happened.
  Rig rig;
  auto l = rig.start();
  REQUIRE(l->wait_joined(1000));
  int p[2];
  REQUIRE(pipe(p) == 0);
  Child c{"/bin/sh", 127};
  c.wait_fd = p[0];
  pid_t spare = l->pid();
  std::thread helper([&] {
    for (int i = 0; i < 2000 && c.started == 0; ++i) usleep(500);
    kill(spare, SIGKILL);
    // A zombie until reaped (the test's thread is in run()).
    for (int i = 0; i < 2000 && state_of(spare) != 'Z'; ++i) usleep(500);
    REQUIRE(write(p[1], "x", 1) == 1);
  });
  GiveUp why;
  pid_t pid = l->run(exec_child, &c, why);
  helper.join();
  CHECK_FALSE(why.happened());
  REQUIRE(pid > 0);
  CHECK(pid == c.started);
  int status = rig.reaped_status(pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 7);
  CHECK(rig.launcher_reaped(*l));
  close(p[0]);
  close(p[1]);
  l.reset();
  CHECK(rig.no_descriptor_left());
}

TEST_CASE("a command process that is slow but running before its exec is waited for, not given up on") {
  Rig rig;
  auto l = rig.start();
  REQUIRE(l->wait_joined(1000));
  Child c{"/bin/sh", 127};
  c.busy_ms = 5 * execd::pty::kHandOverLookMs;  // several looks see it running
  GiveUp why;
  pid_t pid = l->run(exec_child, &c, why);
  CHECK_FALSE(why.happened());
  REQUIRE(pid > 0);
  CHECK(WEXITSTATUS(rig.reaped_status(pid)) == 7);
}

TEST_CASE("a retired launcher exits and leaves no descriptor") {
  Rig rig;
  auto l = rig.start();
  l->retire();
  CHECK(l->wait_gone(2000));
  CHECK(rig.launcher_reaped(*l));
  l.reset();
  CHECK(rig.no_descriptor_left());
}

TEST_CASE("joining a cgroup.procs that refuses makes the launcher of no use") {
  Rig rig;
  int p[2];
  REQUIRE(pipe(p) == 0);
  close(p[0]);  // a write to it fails (EPIPE; SIGPIPE is blocked in the launcher)
  auto l = rig.start({p[1]});
  CHECK_FALSE(l->wait_joined(2000));
  CHECK(l->failed());
  CHECK(l->wait_gone(2000));
  close(p[1]);
  l.reset();
  CHECK(rig.no_descriptor_left());
}

TEST_CASE("a launcher's stack comes back with no poison left by the child that exec'd on it") {
  // The child's frames are instrumented code that never returned; a slab of
  // cold records later mapped at the same addresses faulted under ASan
  // (this ASan clears the shadow at neither munmap nor mmap).
  Rig rig;
  auto l = rig.start();
  Child c{"/bin/sh", 127};
  GiveUp why;
  pid_t pid = l->run(exec_child, &c, why);
  REQUIRE(pid > 0);
  CHECK(WEXITSTATUS(rig.reaped_status(pid)) == 7);
  CHECK(rig.launcher_reaped(*l));
  l.reset();
  // Back among the kept ones (with the stacks of the tests before).
  std::vector<void*> stacks = execd::pty::kept_vm_stacks_now();
  REQUIRE_FALSE(stacks.empty());
  for (void* base : stacks) {
    void* poisoned = poisoned_in(reinterpret_cast<uintptr_t>(base), execd::pty::kVmStackBytes);
    CHECK_MESSAGE(poisoned == nullptr, "poisoned at ", poisoned, " in the stack at ", base);
  }
}

TEST_CASE("a stack a child given up on may still run on waits for it, then serves again") {
  // A stopped child killed at the give-up: its stack is kept back until
  // its CLONE_CHILD_CLEARTID word says it is out of our memory.
  std::string error;
  void* base = execd::pty::take_vm_stack(error);
  REQUIRE(base);
  // (the word at the low end, as a child's is)
  auto* w = static_cast<volatile int*>(base);
  *w = 1;
  execd::pty::give_back_vm_stack(base, w);
  auto kept = execd::pty::kept_vm_stacks_now();
  CHECK(std::find(kept.begin(), kept.end(), base) == kept.end());
  *w = 0;  // its process let go of the memory
  void* again = execd::pty::take_vm_stack(error);  // drains what waited
  kept = execd::pty::kept_vm_stacks_now();
  CHECK((again == base || std::find(kept.begin(), kept.end(), base) != kept.end()));
  execd::pty::give_back_vm_stack(again);
}

// ---- pty/vm_child: the children execd starts itself -------------------------------

TEST_CASE("a child on our memory is waited for until its exec, with clone and with clone3") {
  Rig rig;
  for (bool clone3 : {false, true}) {
#if !defined(__x86_64__)
    if (clone3) break;
#endif
    INFO("clone3: " << clone3);
    Child c{"/bin/sh", 127};
    VmChild r = execd::pty::run_vm_child(exec_child, &c, -1, clone3);
    REQUIRE(r.pid > 0);
    CHECK(r.error == 0);
    CHECK_FALSE(r.gave_up.happened());
    CHECK(c.started == r.pid);
    int status = rig.reaped_status(r.pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 7);
  }
}

TEST_CASE("a child on our memory stopped before its exec is given up on at the first look and killed") {
  // What a root process racing new pids with SIGSTOP did to vfork: the
  // parent waited in the kernel until someone sent SIGCONT.
  Rig rig;
  for (bool clone3 : {false, true}) {
#if !defined(__x86_64__)
    if (clone3) break;
#endif
    INFO("clone3: " << clone3);
    Child c{"/bin/sh", 127};
    c.stop_itself = true;
    int64_t t0 = now_ms();
    VmChild r = execd::pty::run_vm_child(exec_child, &c, -1, clone3);
    int64_t took = now_ms() - t0;
    REQUIRE(r.pid > 0);
    CHECK(r.gave_up.happened());
    CHECK(r.gave_up.state == 'T');
    CHECK(took < 200);
    int status = rig.reaped_status(r.pid);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
  }
}

TEST_CASE("a child on our memory that is slow but running is waited for") {
  Rig rig;
  Child c{"/bin/sh", 127};
  c.busy_ms = 5 * execd::pty::kHandOverLookMs;
  VmChild r = execd::pty::run_vm_child(exec_child, &c);
  REQUIRE(r.pid > 0);
  CHECK_FALSE(r.gave_up.happened());
  CHECK(WEXITSTATUS(rig.reaped_status(r.pid)) == 7);
}

TEST_CASE("process_state reads the state of a process, and 0 for none") {
  CHECK(execd::pty::process_state(getpid()) == 'R');
  pid_t pid = fork();
  if (pid == 0) {
    pause();
    _exit(0);
  }
  REQUIRE(pid > 0);
  kill(pid, SIGSTOP);
  for (int i = 0; i < 1000 && execd::pty::process_state(pid) != 'T'; ++i) usleep(1000);
  CHECK(execd::pty::process_state(pid) == 'T');
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  CHECK(execd::pty::process_state(pid) == 0);
}
