// pty/launcher against the real kernel: a launcher becomes the process it is
// given (same pid, exit status through the reaper), one killed before it is
// used reports so and leaves no descriptor behind, and a retired one exits.
// Cgroup joins are covered by the integration tests (they need a cgroup).
// Under ASan, a used launcher's stack comes back with a clean shadow.
#include "pty/launcher.h"

#include <doctest/doctest.h>
#include <dirent.h>
#include <sanitizer/asan_interface.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "loop_scratch.h"
#include "pty/reaper.h"

using execd::pty::ExitInfo;
using execd::pty::Launcher;
using execd::pty::Reaper;

namespace {

int open_fds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (readdir(d)) ++n;
  closedir(d);
  return n;
}

struct Child {
  const char* path;
  int exit_code_if_exec_fails;
};

void exec_child(void* p) {
  auto* c = static_cast<Child*>(p);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execl(c->path, c->path, "-c", "exit 7", static_cast<char*>(nullptr));
  _exit(c->exit_code_if_exec_fails);
}

// Where launcher stacks are mapped now, by their shape in /proc/self/maps: a
// page for the shared words, a guard page, then the stack (256 KiB in all).
std::vector<uintptr_t> launcher_stacks() {
  struct Range {
    uintptr_t from, to;
    std::string perms;
  };
  std::vector<Range> ranges;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    Range r;
    char perms[8] = {0};
    unsigned long from = 0, to = 0;
    if (sscanf(line.c_str(), "%lx-%lx %7s", &from, &to, perms) != 3) continue;
    r.from = from;
    r.to = to;
    r.perms = perms;
    ranges.push_back(r);
  }
  std::vector<uintptr_t> found;
  for (size_t i = 0; i + 2 < ranges.size(); ++i) {
    const Range &a = ranges[i], &g = ranges[i + 1], &st = ranges[i + 2];
    if (a.perms == "rw-p" && a.to - a.from == 4096 && g.from == a.to && g.perms == "---p" && g.to - g.from == 4096 &&
        st.from == g.to && st.perms == "rw-p" && st.to - a.from == 256 * 1024)
      found.push_back(a.from);
  }
  return found;
}

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
  // Waits (the loop running) until `pid` has been reaped through the reaper.
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

TEST_CASE("a launcher becomes the process it is given, with its pid, and leaves no descriptor") {
  Rig rig;
  auto l = rig.start();
  CHECK(l->wait_joined(1000));
  pid_t pid = l->pid();
  Child c{"/bin/sh", 127};
  REQUIRE(l->run(exec_child, &c));
  int status = rig.reaped_status(pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 7);
  l.reset();
  CHECK(open_fds() == rig.fds_before);
}

TEST_CASE("a child that fails in a launcher exits 127 and is still the launcher's pid") {
  Rig rig;
  auto l = rig.start();
  pid_t pid = l->pid();
  Child c{"/nonexistent/sh", 127};
  REQUIRE(l->run(exec_child, &c));
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
  CHECK_FALSE(l->run(exec_child, &c));  // nothing ran: the caller starts the process another way
  l.reset();
  CHECK(rig.no_descriptor_left());
}

TEST_CASE("a retired launcher exits and leaves no descriptor") {
  Rig rig;
  auto l = rig.start();
  pid_t pid = l->pid();
  l->retire();
  CHECK(l->wait_gone(2000));
  int status = rig.reaped_status(pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  l.reset();
  CHECK(open_fds() == rig.fds_before);
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
  std::vector<uintptr_t> stacks = launcher_stacks();
  REQUIRE_FALSE(stacks.empty());
  pid_t pid = l->pid();
  Child c{"/bin/sh", 127};
  REQUIRE(l->run(exec_child, &c));
  CHECK(WEXITSTATUS(rig.reaped_status(pid)) == 7);
  l.reset();
  for (uintptr_t base : stacks) {
    void* poisoned = poisoned_in(base, 256 * 1024);
    CHECK_MESSAGE(poisoned == nullptr, "poisoned at ", poisoned, " in the stack at ", reinterpret_cast<void*>(base));
  }
}
