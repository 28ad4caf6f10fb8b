// fs::queue_job on a real libuv loop and threadpool: the work runs on a
// pool thread, `done` on the loop thread after it, each job once, and every
// job is freed after its `done` (none leaks, none is freed early).
#include <doctest/doctest.h>
#include <uv.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "fs/pool_job.h"

namespace {

std::atomic<int> g_alive{0};

struct Job {
  Job() { ++g_alive; }
  ~Job() { --g_alive; }
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;
  int index = 0;
  std::thread::id loop_thread, worked_on;
  bool worked = false;
  std::vector<int>* done_order = nullptr;
};

}  // namespace

TEST_CASE("queue_job runs work on the pool and done on the loop, then frees the job") {
  uv_loop_t loop;
  REQUIRE(uv_loop_init(&loop) == 0);
  std::vector<int> done_order;
  constexpr int kJobs = 64;
  for (int i = 0; i < kJobs; ++i) {
    auto job = std::make_unique<Job>();
    job->index = i;
    job->loop_thread = std::this_thread::get_id();
    job->done_order = &done_order;
    execd::fs::queue_job<Job>(
        &loop, std::move(job),
        [](Job& j) {
          j.worked_on = std::this_thread::get_id();
          j.worked = true;
        },
        [](Job& j, int status) {
          CHECK(status == 0);
          CHECK(j.worked);
          CHECK(j.worked_on != j.loop_thread);
          CHECK(std::this_thread::get_id() == j.loop_thread);
          CHECK(g_alive.load() > 0);  // this job is still here
          j.done_order->push_back(j.index);
        });
  }
  CHECK(g_alive.load() == kJobs);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK(done_order.size() == static_cast<size_t>(kJobs));
  std::vector<int> seen(kJobs, 0);
  for (int i : done_order) ++seen.at(static_cast<size_t>(i));
  for (int n : seen) CHECK(n == 1);
  CHECK(g_alive.load() == 0);
  CHECK(uv_loop_close(&loop) == 0);
}
