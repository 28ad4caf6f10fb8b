// execd/work_gate: see header.
#include "execd/work_gate.h"

#include <algorithm>

#include "fs/pool_job.h"
#include "pty/namespaces.h"

namespace execd {

int WorkGate::queue(uv_loop_t* loop, Ticket& t, uv_work_cb work, uv_after_work_cb after) {
  t.gate = this;
  t.loop = loop;
  t.work = work;
  t.after = after;
  if (running_ >= cap_) {
    waiting_.push_back(&t);
    return 0;
  }
  return start(t);
}

int WorkGate::start(Ticket& t) {
  int rc = fs::queue_work(t.loop, &t.req, t.mount || t.identity ? &WorkGate::run : t.work, &WorkGate::finished);
  if (rc == 0) ++running_;
  return rc;
}

// A pool thread: inside an isolated session's mount namespace and as a
// user's fsuid/fsgid, for this work only.
void WorkGate::run(uv_work_t* req) {
  Ticket& t = *reinterpret_cast<Ticket*>(req);
  pty::MountScope scope(t.mount.get());
  if (scope.error()) {
    t.mount_error = scope.error();
    return;
  }
  fs::ThreadIdentity as(t.identity);
  t.work(req);
}

void WorkGate::finished(uv_work_t* req, int status) {
  Ticket& t = *reinterpret_cast<Ticket*>(req);
  WorkGate& gate = *t.gate;
  --gate.running_;
  if (t.mount_error && status == 0) status = UV_EIO;
  uv_after_work_cb after = t.after;
  gate.start_waiting();  // before `after`, which may free the ticket or queue more
  after(req, status);
}

void WorkGate::start_waiting() {
  while (running_ < cap_ && !waiting_.empty()) {
    Ticket* t = waiting_.front();
    waiting_.pop_front();
    if (start(*t) != 0) t->after(&t->req, UV_ENOMEM);
  }
}

void WorkGate::cancel(Ticket& t) {
  auto it = std::find(waiting_.begin(), waiting_.end(), &t);
  if (it == waiting_.end()) return;
  waiting_.erase(it);
  t.after(&t.req, UV_ECANCELED);
}

}  // namespace execd
