// execd/envd/processes: see header.
#include "execd/envd/processes.h"

namespace execd::envd {

namespace wire = protocol::envd;
namespace cn = protocol::connect;

cn::Error process_not_found(const wire::ProcessSelector& sel) {
  return {cn::Code::not_found, sel.pid ? "process with pid " + std::to_string(*sel.pid) + " not found"
                               : sel.tag ? "process with tag " + *sel.tag + " not found"
                                         : std::string("no process selected (give a pid or a tag)")};
}

EnvdProcesses::Entry* EnvdProcesses::find(const wire::ProcessSelector& sel) {
  uint32_t pid = 0;
  if (sel.pid) {
    pid = *sel.pid;
  } else if (sel.tag) {
    auto t = by_tag_.find(*sel.tag);
    if (t == by_tag_.end()) return nullptr;
    pid = t->second;
  } else {
    return nullptr;
  }
  auto it = by_pid_.find(pid);
  if (it == by_pid_.end()) return nullptr;
  if (!execution(it->second)) {
    // Let go of by the registry (--retention): gone here too.
    if (it->second.tag) by_tag_.erase(*it->second.tag);
    by_pid_.erase(it);
    return nullptr;
  }
  return &it->second;
}

void EnvdProcesses::add(Entry e) {
  if (by_pid_.size() >= executions_kept_hint()) prune();
  uint32_t pid = e.pid;
  if (auto old = by_pid_.find(pid); old != by_pid_.end() && old->second.tag) {
    // The pid came round again: the older process is no longer reachable by it.
    auto t = by_tag_.find(*old->second.tag);
    if (t != by_tag_.end() && t->second == pid) by_tag_.erase(t);
  }
  if (e.tag) by_tag_[*e.tag] = pid;
  by_pid_[pid] = std::move(e);
}

size_t EnvdProcesses::running() {
  size_t n = 0;
  for (auto& [pid, e] : by_pid_)
    if (exec::Execution* x = execution(e); x && x->running()) ++n;
  return n;
}

void EnvdProcesses::prune() {
  for (auto it = by_pid_.begin(); it != by_pid_.end();) {
    if (execution(it->second)) {
      ++it;
      continue;
    }
    if (it->second.tag) {
      auto t = by_tag_.find(*it->second.tag);
      if (t != by_tag_.end() && t->second == it->first) by_tag_.erase(t);
    }
    it = by_pid_.erase(it);
  }
}

size_t EnvdProcesses::executions_kept_hint() const { return ctx.config.max_records + 1024; }

}  // namespace execd::envd
