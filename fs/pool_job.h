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

#include <signal.h>
#include <uv.h>

#include <memory>

namespace execd::fs {

// Every uv_queue_work of execd's goes through here. The first one starts
// libuv's threads, which inherit the caller's signal mask: they start with
// the asynchronous signals blocked, so the kernel delivers SIGCHLD, SIGTERM
// and the rest to the loop thread, which handles them, and never wakes an
// idle pool thread (on another CPU) only to write libuv's signal pipe.
// Faults (SIGSEGV, SIGBUS, ...) stay deliverable, for sanitizers' handlers.
inline int queue_work(uv_loop_t* loop, uv_work_t* req, uv_work_cb work, uv_after_work_cb after) {
  static bool pool_started = false;
  if (pool_started) return uv_queue_work(loop, req, work, after);
  sigset_t quiet, old;
  sigfillset(&quiet);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS}) sigdelset(&quiet, sig);
  pthread_sigmask(SIG_BLOCK, &quiet, &old);
  int rc = uv_queue_work(loop, req, work, after);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  pool_started = rc == 0;
  return rc;
}

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
  queue_work(
      loop, &h->req, [](uv_work_t* r) { static_cast<Holder*>(r->data)->work(*static_cast<Holder*>(r->data)->job); },
      [](uv_work_t* r, int status) {
        std::unique_ptr<Holder> held(static_cast<Holder*>(r->data));
        held->done(*held->job, status);
      });
}

}  // namespace execd::fs
