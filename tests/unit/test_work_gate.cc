// WorkGate on a real libuv loop and threadpool: the cap holds, every queued
// item runs once, and work withdrawn while waiting never runs.
#include <doctest/doctest.h>
#include <uv.h>

#include <atomic>
#include <vector>

#include "execd/work_gate.h"

using execd::WorkGate;

namespace {

std::atomic<int> g_running{0};
std::atomic<int> g_peak{0};

struct Item {
  WorkGate::Ticket ticket;
  int index;
  int status = 1;  // 1 = after-callback not called yet
  bool ran = false;
  std::vector<int>* finished;
};

void work(uv_work_t* w) {
  auto* item = static_cast<Item*>(w->data);
  item->ran = true;
  int now = ++g_running;
  int peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
  // Long enough that the items overlap if the gate lets them.
  uv_sleep(5);
  --g_running;
}

void after(uv_work_t* w, int status) {
  auto* item = static_cast<Item*>(w->data);
  item->status = status;
  item->finished->push_back(item->index);
}

}  // namespace

TEST_CASE("WorkGate: at most cap on threads, cancellable while waiting, two gates apart") {
  uv_loop_t loop;
  REQUIRE(uv_loop_init(&loop) == 0);
  g_running = 0;
  g_peak = 0;
  WorkGate gate(2);
  std::vector<int> finished;
  std::vector<Item> items(12);
  for (int i = 0; i < 12; ++i) {
    items[i].index = i;
    items[i].ticket.req.data = &items[i];
    items[i].finished = &finished;
    REQUIRE(gate.queue(&loop, items[i].ticket, work, after) == 0);
  }
  CHECK(gate.running() == 2);
  CHECK(gate.waiting() == 10);
  gate.cancel(items[5].ticket);  // waiting: withdrawn at once
  CHECK(items[5].status == UV_ECANCELED);
  CHECK(gate.waiting() == 9);
  gate.cancel(items[0].ticket);  // on a thread: runs to its end
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK(g_peak.load() <= 2);
  CHECK(gate.running() == 0);
  CHECK(gate.waiting() == 0);
  CHECK_FALSE(items[5].ran);
  for (int i = 0; i < 12; ++i) {
    if (i == 5) continue;
    CHECK(items[i].ran);
    CHECK(items[i].status == 0);
  }
  CHECK(finished.size() == 12);
  // A second gate keeps its own count: no state is shared between gates.
  WorkGate other(1);
  std::vector<Item> more(3);
  for (int i = 0; i < 3; ++i) {
    more[i].index = 100 + i;
    more[i].ticket.req.data = &more[i];
    more[i].finished = &finished;
    REQUIRE(other.queue(&loop, more[i].ticket, work, after) == 0);
  }
  CHECK(other.running() == 1);
  CHECK(gate.running() == 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK(finished.size() == 15);
  uv_loop_close(&loop);
}
