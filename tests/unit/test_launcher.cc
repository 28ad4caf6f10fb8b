// pty/launcher against the real kernel: a launcher becomes the process it is
// given (same pid, exit status through the reaper), one killed before it is
// used reports so and leaves no descriptor behind, and a retired one exits.
// Cgroup joins are covered by the integration tests (they need a cgroup).
#include "pty/launcher.h"

#include <doctest/doctest.h>
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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
