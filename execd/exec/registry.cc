// execd/exec/registry: see header.
#include "execd/exec/registry.h"

#include <algorithm>
#include <set>

#include "execd/api/journal.h"
#include "execd/context.h"

namespace execd::exec {

Registry::Registry(uv_loop_t* loop, RegistrySettings settings, api::Journal& journal, Activity& activity)
    : loop_(loop),
      settings_(std::move(settings)),
      journal_(journal),
      activity_(activity),
      records_(
          loop, settings_.state_dir,
          [this] {
            std::set<std::string> ids;
            for (const auto& [id, e] : executions_) ids.insert(id);
            return ids;
          },
          [this] { return executions_.size(); }),
      write_delay_(loop, kLogWriteDelayMs) {
  uv_timer_init(loop, &sweep_timer_);
  sweep_timer_.data = this;
  sweep_period_ = static_cast<uint64_t>(std::clamp<int64_t>(settings_.retention_ms / 4, 100, 10000));
  auto on_sweep = [](uv_timer_t* t) { static_cast<Registry*>(t->data)->sweep(); };
  uv_timer_start(&sweep_timer_, on_sweep, sweep_period_, sweep_period_);
  uv_unref(reinterpret_cast<uv_handle_t*>(&sweep_timer_));
  for (auto& loaded : records_.load(settings_.retention_ms, settings_.log_limit)) {
    auto e = std::make_unique<Execution>(*this, loaded.record, std::move(loaded.log));
    Execution* raw = e.get();
    finished_order_.push_back(raw);
    executions_[raw->id()] = std::move(e);
    if (raw->lost()) {
      records_.persist(*raw);
      journal_append(raw->journal_entry());
    }
  }
  if (finished_order_.size() > settings_.max_records) uv_timer_start(&sweep_timer_, on_sweep, 0, sweep_period_);
}

Registry::~Registry() = default;

Execution& Registry::create(ExecutionSpec spec, uint64_t log_limit) {
  if (spec.id.empty()) spec.id = random_id32();
  auto e = std::make_unique<Execution>(*this, std::move(spec), log_limit ? log_limit : settings_.log_limit);
  Execution& ref = *e;
  executions_[ref.id()] = std::move(e);
  ++running_;
  return ref;
}

Execution* Registry::find(const std::string& id) {
  auto it = executions_.find(id);
  return it == executions_.end() ? nullptr : it->second.get();
}

void Registry::journal_append(const nlohmann::ordered_json& entry) {
  if (journal_.enabled()) journal_.append(entry);
}

void Registry::started(Execution& e) {
  ++running_kind_[static_cast<int>(e.kind())];
  activity_.begin(e.id());
}

void Registry::finished(Execution& e) {
  --running_;
  if (e.was_started()) {
    --running_kind_[static_cast<int>(e.kind())];
    activity_.end(e.id());
  }
  finished_order_.push_back(&e);
  // Swept from the timer, never from inside the execution's own callback.
  if (finished_order_.size() > settings_.max_records && !closed_)
    uv_timer_start(
        &sweep_timer_, [](uv_timer_t* t) { static_cast<Registry*>(t->data)->sweep(); }, 0, sweep_period_);
}

void Registry::forget(Execution& e) {
  --running_;
  // Nothing ran, so nothing was written and nothing is queued for it.
  executions_.erase(e.id());
}

void Registry::sweep() {
  int64_t now = unix_ns();
  while (!finished_order_.empty()) {
    Execution* e = finished_order_.front();
    bool expired = now - e->finished_ns() >= settings_.retention_ms * 1000000;
    if (!expired && finished_order_.size() <= settings_.max_records) break;
    // Readers, a record write, or a read or write of the retained log in
    // flight point at it: next sweep.
    if (e->in_use()) break;
    if (OutputLog* log = e->log()) log->remove();
    finished_order_.pop_front();
    executions_.erase(e->id());
  }
}

void Registry::signal_all(int sig) {
  for (auto& [id, e] : executions_) e->signal(sig);
}

void Registry::close() {
  closed_ = true;
  uv_close(reinterpret_cast<uv_handle_t*>(&sweep_timer_), nullptr);
  // The files stay: a restarted execd answers for them. Runners let go of
  // their processes (left to be reaped as orphans) and handles.
  for (auto& [id, e] : executions_) e->close();
  write_delay_.close();
  records_.close();
}

}  // namespace execd::exec
