// execd/exec/registry: see header.
#include "execd/exec/registry.h"

#include <algorithm>
#include <set>

#include "execd/journal/journal.h"
#include "execd/clock.h"
#include "execd/ids.h"

namespace execd::exec {

namespace {

// What a cold record is packed against: a finished command's record of this
// boot, so that its field names and common values cost next to nothing.
std::string cold_dictionary(const std::string& boot_id) {
  protocol::StoredExecution t;
  t.id = std::string(32, '0');
  t.content = "true";
  t.fingerprint = std::string(64, '0');
  t.boot_id = boot_id;
  t.finished = true;
  t.result.exit_code = 0;
  t.result.stdout_sha256 = t.result.stderr_sha256 =
      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";  // of nothing
  return protocol::encode_stored_execution(t);
}

}  // namespace

Registry::Registry(uv_loop_t* loop, RegistrySettings settings, journal::Journal& journal, Activity& activity)
    : loop_(loop),
      settings_(std::move(settings)),
      journal_(journal),
      activity_(activity),
      budget_([this] {
        StateBudget::Settings b = settings_.budget;
        b.dir = settings_.state_dir;
        return b;
      }()),
      records_(
          loop, settings_.state_dir,
          [this] {
            std::set<std::string> ids;
            for (const auto& [id, e] : executions_) ids.insert(id);
            cold_.each([&](const ColdRecords::Entry& c) { ids.emplace(c.id); });
            return ids;
          },
          [this] { return executions_.size() + cold_.size(); }),
      write_delay_(loop, kLogWriteDelayMs) {
  uv_timer_init(loop, &sweep_timer_);
  sweep_timer_.data = this;
  sweep_period_ = static_cast<uint64_t>(std::clamp<int64_t>(settings_.retention_ms / 4, 100, 10000));
  auto on_sweep = [](uv_timer_t* t) { static_cast<Registry*>(t->data)->sweep(); };
  uv_timer_start(&sweep_timer_, on_sweep, sweep_period_, sweep_period_);
  uv_unref(reinterpret_cast<uv_handle_t*>(&sweep_timer_));
  budget_.make_room = [this](uint64_t bytes) { make_room(bytes); };
  for (auto& loaded : records_.load(settings_.retention_ms, settings_.log_limit)) {
    // What an earlier execd left counts from the start.
    if (loaded.log) loaded.log->set_budget(&budget_);
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
  // A smaller budget than the last execd's, or a fuller disk: room now.
  budget_.refresh(true);
  budget_.need(0);
}

Registry::~Registry() = default;

Execution& Registry::create(ExecutionSpec spec, uint64_t log_limit) {
  if (spec.id.empty()) spec.id = random_id32();
  cold_.erase(spec.id);  // as a hot one of the same id would be replaced
  auto e = std::make_unique<Execution>(*this, std::move(spec), log_limit ? log_limit : settings_.log_limit);
  Execution& ref = *e;
  executions_[ref.id()] = std::move(e);
  ++running_;
  return ref;
}

Execution* Registry::find(const std::string& id) {
  auto it = executions_.find(id);
  return it != executions_.end() ? it->second.get() : warm(id);
}

size_t Registry::cool(int64_t min_age_ms) {
  if (closed_) return 0;
  int64_t now = unix_ns();
  // Those that stay are moved up in place: most ticks cool nothing.
  auto kept = finished_order_.begin();
  for (Execution* e : finished_order_) {
    if (now - e->finished_ns() < min_age_ms * 1000000 || !e->may_go_cold()) {
      *kept++ = e;
      continue;
    }
    auto [first_k, last_k] = e->log()->segment_range();
    std::string record = packer().pack(protocol::encode_stored_execution(e->stored()));
    // Its log goes without remove(): its bytes stay counted, with the record.
    cold_.put({e->id(), e->started_ns(), e->finished_ns(), first_k, last_k, e->cold_flags(), record,
               e->log()->disk_bytes()});
    executions_.erase(executions_.find(e->id()));
  }
  size_t went = static_cast<size_t>(finished_order_.end() - kept);
  finished_order_.erase(kept, finished_order_.end());
  return went;
}

Execution* Registry::warm(const std::string& id) {
  std::optional<ColdRecords::Entry> c = cold_.find(id);
  if (!c) return nullptr;
  std::optional<protocol::StoredExecution> stored = unpack(*c);
  if (!stored) {  // it was encoded here: cannot happen
    drop_cold(*c);
    return nullptr;
  }
  std::string base = settings_.state_dir + "/" + id;
  auto log = std::make_unique<OutputLog>(loop_, base, settings_.log_limit);
  log->adopt(OutputLog::segment_names(base, c->first_k, c->last_k));
  log->set_budget(&budget_);
  budget_.add_output(-static_cast<int64_t>(c->log_bytes));  // counted by the log again
  auto e = std::make_unique<Execution>(*this, *stored, std::move(log));
  e->set_cold_flags(c->flags);
  cold_.erase(id);
  Execution* raw = e.get();
  // At the back: the sweep lets it go once those finished before it go, or
  // when it goes cold again, by its own finish time.
  finished_order_.push_back(raw);
  executions_[raw->id()] = std::move(e);
  return raw;
}

std::vector<Registry::Brief> Registry::page(std::optional<bool> running,
                                            const std::optional<protocol::ListPosition>& after, size_t limit,
                                            bool& more) const {
  std::vector<Brief> page;
  each_brief([&](const Brief& e) {
    if (e.starting) return;  // reserved, not started: nothing to show yet
    if (running && *running == e.done) return;
    if (after && !after->before(e.started_ns, e.id)) return;
    page.push_back(e);
  });
  auto order = [](const Brief& a, const Brief& b) {
    return a.started_ns != b.started_ns ? a.started_ns < b.started_ns : a.id < b.id;
  };
  more = page.size() > limit;
  if (more) {
    std::partial_sort(page.begin(), page.begin() + static_cast<long>(limit), page.end(), order);
    page.resize(limit);
  } else {
    std::sort(page.begin(), page.end(), order);
  }
  return page;
}

std::optional<nlohmann::ordered_json> Registry::summary_json(const std::string& id, bool with_content) {
  if (auto it = executions_.find(id); it != executions_.end()) return it->second->summary_json(with_content);
  std::optional<ColdRecords::Entry> c = cold_.find(id);
  if (!c) return std::nullopt;
  std::optional<protocol::StoredExecution> stored = unpack(*c);
  if (!stored) return std::nullopt;
  Execution e(*this, *stored, nullptr);
  e.set_cold_flags(c->flags);
  return e.summary_json(with_content);
}

const protocol::RecordPacker& Registry::packer() {
  if (!packer_) packer_.emplace(cold_dictionary(records_.boot_id()));
  return *packer_;
}

std::optional<protocol::StoredExecution> Registry::unpack(const ColdRecords::Entry& c) {
  std::optional<std::string> record = packer().unpack(c.record);
  return record ? protocol::decode_stored_execution(*record) : std::nullopt;
}

void Registry::drop_cold(const ColdRecords::Entry& c) {
  OutputLog::remove_segments(loop_, settings_.state_dir + "/" + std::string(c.id), c.first_k, c.last_k);
  budget_.add_output(-static_cast<int64_t>(c.log_bytes));
  cold_.erase(std::string(c.id));
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
  finished_output_ = true;
  // Swept from the timer, never from inside the execution's own callback.
  if (finished_order_.size() + cold_.size() > settings_.max_records && !closed_)
    uv_timer_start(
        &sweep_timer_, [](uv_timer_t* t) { static_cast<Registry*>(t->data)->sweep(); }, 0, sweep_period_);
}

void Registry::forget(Execution& e) {
  --running_;
  // Nothing ran, so nothing was written and nothing is queued for it.
  executions_.erase(e.id());
}

void Registry::sweep() {
  // The journal grew, or the user's files took free space: room again.
  budget_.refresh(true);
  budget_.need(0);
  int64_t now = unix_ns();
  // Cold ones first: they went cold because they were finished and unused
  // for a while, so they are mostly the oldest.
  while (std::optional<ColdRecords::Entry> c = cold_.oldest()) {
    bool expired = now - c->finished_ns >= settings_.retention_ms * 1000000;
    if (!expired && finished_order_.size() + cold_.size() <= settings_.max_records) break;
    drop_cold(*c);
  }
  while (!finished_order_.empty()) {
    Execution* e = finished_order_.front();
    bool expired = now - e->finished_ns() >= settings_.retention_ms * 1000000;
    if (!expired && finished_order_.size() + cold_.size() <= settings_.max_records) break;
    // Readers, a record write, or a read or write of the retained log in
    // flight point at it: next sweep.
    if (e->in_use()) break;
    if (OutputLog* log = e->log()) log->remove();
    finished_order_.pop_front();
    executions_.erase(e->id());
  }
}

uint64_t Registry::evict_cold(const std::string& id) {
  std::optional<ColdRecords::Entry> c = cold_.find(id);
  if (!c || c->log_bytes == 0) return 0;
  OutputLog::remove_segments(loop_, settings_.state_dir + "/" + id, c->first_k, c->last_k);
  uint64_t freed = c->log_bytes;
  budget_.add_output(-static_cast<int64_t>(freed));
  // The record stays, with no segments: warmed, its log is empty and its
  // record's byte counts make every offset a gap.
  std::string record(c->record);
  ColdRecords::Entry kept = *c;
  kept.id = id;
  kept.record = record;
  kept.first_k = 1;
  kept.last_k = 0;
  kept.log_bytes = 0;
  cold_.put(kept);
  return freed;
}

void Registry::make_room(uint64_t bytes) {
  if (closed_) return;
  uint64_t freed = 0;
  if (finished_output_) {
    // Finished runs' output, hot and cold, oldest finish first.
    struct Candidate {
      int64_t finished_ns;
      Execution* hot;
      std::string cold_id;
    };
    std::vector<Candidate> candidates;
    for (Execution* e : finished_order_)
      if (e->log() && e->log()->disk_bytes() > 0) candidates.push_back({e->finished_ns(), e, {}});
    cold_.each([&](const ColdRecords::Entry& c) {
      if (c.log_bytes > 0) candidates.push_back({c.finished_ns, nullptr, std::string(c.id)});
    });
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Candidate& a, const Candidate& b) { return a.finished_ns < b.finished_ns; });
    finished_output_ = !candidates.empty();
    for (const auto& c : candidates) {
      if (freed >= bytes) break;
      freed += c.hot ? c.hot->log()->evict() : evict_cold(c.cold_id);
    }
    budget_.count_evicted(freed);
  }
  // Then running runs, those that retain most first, one oldest segment at a
  // time; a run down to its open segment keeps it.
  uint64_t trimmed = 0;
  while (freed + trimmed < bytes) {
    Execution* most = nullptr;
    uint64_t most_bytes = 0;
    for (auto& [id, e] : executions_) {
      OutputLog* log = e->log();
      if (e->done() || !log) continue;
      std::optional<uint64_t> upto = log->oldest_segment_end();
      if (!upto || log->disk_bytes() <= most_bytes || !e->budget_may_shed(*upto)) continue;
      most = e.get();
      most_bytes = log->disk_bytes();
    }
    if (!most) break;
    uint64_t n = most->log()->shed_oldest();
    if (n == 0) break;
    trimmed += n;
  }
  budget_.count_trimmed(trimmed);
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
