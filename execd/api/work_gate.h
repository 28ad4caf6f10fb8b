// execd/api/work_gate: a cap on how many of libuv's pool threads file work
// may hold at once. The pool is process-wide and shared with command
// start-up (working directories, records, journal), so without a cap a burst
// of searches, listings or transfers would make `echo ok` wait for a disk
// walk. Work over the cap waits here, in arrival order, and work whose client
// left while it waited is withdrawn before it ever takes a thread. Loop
// thread only.
#pragma once

#include <uv.h>

#include <cstddef>
#include <deque>
#include <unordered_map>

namespace execd::api {

class WorkGate {
 public:
  explicit WorkGate(size_t cap) : cap_(cap) {}
  // Like uv_queue_work, at most `cap` at a time. `after` runs on the loop;
  // with UV_ECANCELED when the request was withdrawn by cancel().
  int queue(uv_loop_t* loop, uv_work_t* req, uv_work_cb work, uv_after_work_cb after);
  // Withdraws `req` if it has not started (its `after` runs, now, with
  // UV_ECANCELED); work already on a thread runs to its end.
  void cancel(uv_work_t* req);
  size_t running() const { return running_; }
  size_t waiting() const { return waiting_.size(); }

 private:
  struct Pending {
    uv_loop_t* loop;
    uv_work_t* req;
    uv_work_cb work;
    uv_after_work_cb after;
  };
  static void finished(uv_work_t* req, int status);
  int start(const Pending& p);
  void start_waiting();

  size_t cap_;
  size_t running_ = 0;
  std::deque<Pending> waiting_;
  struct Started {
    WorkGate* gate;
    uv_after_work_cb after;
  };
  // uv_work_t has no spare field: the gate and the caller's after-callback
  // of every request on a thread, until its work is done.
  static std::unordered_map<uv_work_t*, Started>& started();
};

// The gate for file work (files, directories, uploads, downloads, searches):
// half the pool, so command start-up always finds a thread.
WorkGate& file_work();
// The pool size execd asks libuv for (UV_THREADPOOL_SIZE).
constexpr size_t kPoolThreads = 16;

}  // namespace execd::api
