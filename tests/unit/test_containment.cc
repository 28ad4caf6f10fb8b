// Containment against the machine's real cgroup v1 hierarchies, under a
// parent of the test's own: what shutdown leaves behind. Skipped where cgroup
// v1 cannot be used (not root, a pure v2 machine).
#include <dirent.h>
#include <doctest/doctest.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <uv.h>

#include <atomic>
#include <cerrno>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "pty/cgroup.h"

namespace {

// Every hierarchy mount under /sys/fs/cgroup (the cpu,cpuacct links once).
std::vector<std::string> hierarchy_roots() {
  std::vector<std::string> out;
  for (const char* c : {"blkio", "cpu,cpuacct", "cpuset", "devices", "freezer", "memory", "pids", "cpu", "cpuacct"}) {
    std::string p = std::string("/sys/fs/cgroup/") + c;
    struct stat st;
    if (lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) out.push_back(p);
  }
  return out;
}

bool exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

}  // namespace

// A spare cgroup is made on the threadpool right after a command's cgroup;
// a shutdown that comes while that job runs must still leave nothing: the
// job's mkdir and shutdown's rmdir of execd-<pid> can pass each other.
TEST_CASE("a shutdown while a spare cgroup is being made leaves no directory") {
  if (geteuid() != 0) {
    MESSAGE("skipped: needs root");
    return;
  }
  std::string parent = "/execd-unit-" + std::to_string(std::random_device{}());
  std::string own = "execd-" + std::to_string(getpid());
  for (int round = 0; round < 30; ++round) {
    uv_loop_t loop;
    uv_loop_init(&loop);
    {
      execd::pty::Containment c;
      c.init(&loop, true, parent);
      if (c.mode() != execd::pty::ContainmentMode::cgroup_v1) {
        MESSAGE("skipped: no cgroup v1 here");
        c.shutdown();
        c.close();
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        break;
      }
      std::string error;
      auto cg = c.create({}, error);  // starts making a spare
      CHECK_MESSAGE(cg, error);
      c.shutdown();
      c.close();
      uv_run(&loop, UV_RUN_DEFAULT);  // the spare's job comes back
    }
    CHECK(uv_loop_close(&loop) == 0);
    for (const auto& root : hierarchy_roots()) {
      std::string base = root + parent + "/" + own;
      INFO("round " << round);
      CHECK_MESSAGE(!exists(base), base);
    }
  }
  // What a failing round left, so that the machine stays clean.
  for (const auto& root : hierarchy_roots()) {
    std::string base = root + parent + "/" + own;
    if (DIR* d = opendir(base.c_str())) {
      while (dirent* e = readdir(d))
        if (e->d_name[0] != '.') rmdir((base + "/" + e->d_name).c_str());
      closedir(d);
    }
    rmdir(base.c_str());
    rmdir((root + parent).c_str());
  }
}

// This binary's poll(): as the kernel's, except that it can be told to fail
// the next calls with EINTR the way a signal that arrives during the call
// does, its handler having written a byte where the loop watches (libuv's
// and the reaper's handlers do that). Nothing else in the unit tests sets it.
namespace {
std::atomic<int> interrupted_polls{0};
int interrupting_handler_writes_to = -1;
}  // namespace

extern "C" int poll(struct pollfd* fds, nfds_t n, int timeout_ms) {
  if (interrupted_polls > 0) {
    --interrupted_polls;
    if (write(interrupting_handler_writes_to, "s", 1) != 1) return -1;
    errno = EINTR;
    return -1;
  }
  timespec ts = {timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
  return static_cast<int>(syscall(SYS_ppoll, fds, n, timeout_ms < 0 ? nullptr : &ts, nullptr, 0));
}

TEST_CASE("loop_has_ready_io: a signal during the look is work, not an idle loop") {
  // A command's SIGCHLD that interrupted the look was taken for "nothing
  // ready", and a spare's clone then went before that command's exit.
  uv_loop_t loop;
  REQUIRE(uv_loop_init(&loop) == 0);
  int p[2];
  REQUIRE(pipe(p) == 0);
  uv_poll_t watch;
  uv_poll_init(&loop, &watch, p[0]);
  uv_poll_start(&watch, UV_READABLE, [](uv_poll_t*, int, int) {});
  uv_run(&loop, UV_RUN_NOWAIT);  // the watch reaches the kernel
  CHECK_FALSE(execd::pty::loop_has_ready_io(&loop));
  interrupting_handler_writes_to = p[1];
  interrupted_polls = 1;
  CHECK(execd::pty::loop_has_ready_io(&loop));
  CHECK(interrupted_polls == 0);
  uv_close(reinterpret_cast<uv_handle_t*>(&watch), nullptr);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK(uv_loop_close(&loop) == 0);
  close(p[0]);
  close(p[1]);
}

TEST_CASE("loop_has_ready_io: a look that leaves libuv's order as the kernel gave it") {
  // Two pipes written in order, A then B: libuv must still see A first after
  // the look (an epoll_wait for one event would have moved A behind B, and a
  // command's stderr ahead of the stdout it wrote first).
  uv_loop_t loop;
  REQUIRE(uv_loop_init(&loop) == 0);
  int a[2], b[2];
  REQUIRE(pipe(a) == 0);
  REQUIRE(pipe(b) == 0);
  std::string order;
  uv_poll_t pa, pb;
  uv_poll_init(&loop, &pa, a[0]);
  uv_poll_init(&loop, &pb, b[0]);
  pa.data = pb.data = &order;
  auto on_ready = [](uv_poll_t* h, int, int) {
    char c;
    if (read(h->io_watcher.fd, &c, 1) == 1) static_cast<std::string*>(h->data)->push_back(c);
  };
  uv_poll_start(&pa, UV_READABLE, on_ready);
  uv_poll_start(&pb, UV_READABLE, on_ready);
  uv_run(&loop, UV_RUN_NOWAIT);  // the watches reach the kernel
  CHECK_FALSE(execd::pty::loop_has_ready_io(&loop));
  REQUIRE(write(a[1], "A", 1) == 1);
  REQUIRE(write(b[1], "B", 1) == 1);
  CHECK(execd::pty::loop_has_ready_io(&loop));
  uv_run(&loop, UV_RUN_NOWAIT);
  CHECK(order == "AB");
  CHECK_FALSE(execd::pty::loop_has_ready_io(&loop));
  for (uv_poll_t* p : {&pa, &pb}) uv_close(reinterpret_cast<uv_handle_t*>(p), nullptr);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK(uv_loop_close(&loop) == 0);
  for (int fd : {a[0], a[1], b[0], b[1]}) close(fd);
}
