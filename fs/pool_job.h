// fs/pool_job: the one shape of blocking work handed to libuv's threadpool.
// Every user of the pool does file work (the output log, records, the
// journal, cgroup directories, /proc scans, the /files API), so it lives
// with the file operations, where pty/ and execd/ both reach it. A job is a
// plain struct the caller fills; `work` runs on a pool thread and touches
// only what the job holds; `done` runs on the loop afterwards, with the
// status libuv gives (UV_ECANCELED: never ran). The job is freed right after
// `done`. Queueing cannot fail: uv_queue_work refuses only a null work
// callback, and `work` is never null here.
//
// Work that must be withdrawable before it starts goes through
// execd/api/work_gate's WorkGate instead, which needs the uv_work_t itself.
#pragma once

#include <uv.h>

#include <memory>

namespace execd::fs {

template <class Job>
void queue_job(uv_loop_t* loop, std::unique_ptr<Job> job, void (*work)(Job&), void (*done)(Job&, int status)) {
  struct Holder {
    uv_work_t req;
    std::unique_ptr<Job> job;
    void (*work)(Job&);
    void (*done)(Job&, int);
  };
  auto* h = new Holder{{}, std::move(job), work, done};
  h->req.data = h;
  uv_queue_work(
      loop, &h->req, [](uv_work_t* r) { static_cast<Holder*>(r->data)->work(*static_cast<Holder*>(r->data)->job); },
      [](uv_work_t* r, int status) {
        std::unique_ptr<Holder> held(static_cast<Holder*>(r->data));
        held->done(*held->job, status);
      });
}

}  // namespace execd::fs
