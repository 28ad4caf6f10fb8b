// execd/api/work_gate: see header.
#include "execd/api/work_gate.h"

#include <algorithm>

namespace execd::api {

WorkGate& file_work() {
  // One pool per process, so one gate for its file work.
  static auto* gate = new WorkGate(kPoolThreads / 2);
  return *gate;
}

int WorkGate::queue(uv_loop_t* loop, uv_work_t* req, uv_work_cb work, uv_after_work_cb after) {
  Pending p{loop, req, work, after};
  if (running_ >= cap_) {
    waiting_.push_back(p);
    return 0;
  }
  return start(p);
}

std::unordered_map<uv_work_t*, WorkGate::Started>& WorkGate::started() {
  static auto* map = new std::unordered_map<uv_work_t*, Started>;
  return *map;
}

int WorkGate::start(const Pending& p) {
  started()[p.req] = Started{this, p.after};
  int rc = uv_queue_work(p.loop, p.req, p.work, &WorkGate::finished);
  if (rc != 0) {
    started().erase(p.req);
    return rc;
  }
  ++running_;
  return 0;
}

void WorkGate::finished(uv_work_t* req, int status) {
  auto it = started().find(req);
  Started s = it->second;
  started().erase(it);
  --s.gate->running_;
  s.gate->start_waiting();  // before `after`, which may free `req` or queue more
  s.after(req, status);
}

void WorkGate::start_waiting() {
  while (running_ < cap_ && !waiting_.empty()) {
    Pending p = waiting_.front();
    waiting_.pop_front();
    if (start(p) != 0) p.after(p.req, UV_ENOMEM);
  }
}

void WorkGate::cancel(uv_work_t* req) {
  auto it = std::find_if(waiting_.begin(), waiting_.end(), [&](const Pending& p) { return p.req == req; });
  if (it == waiting_.end()) return;
  uv_after_work_cb after = it->after;
  waiting_.erase(it);
  after(req, UV_ECANCELED);
}

}  // namespace execd::api
