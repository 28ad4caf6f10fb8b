// execd/exec/registry: every execution execd knows, by id, and the sweep
// that lets go of finished ones once --retention has passed (or when more
// than --max-records finished ones are kept), never while something still
// uses one (Execution::in_use). The registry owns its executions and their
// record store (exec/record_store); the journal is handed to it at
// construction. Executions reach both through it.
//
// A finished execution that nothing uses goes cold (exec/cold_records: its
// record, no objects) when the daemon's housekeeping says so (cool), and
// is warmed again (rebuilt from that record and its files, as a restarted
// execd would) when find() asks for it. Callers never see the difference,
// except that an Execution pointer is good only until the next cool().
//
// The state directory's budget (exec/state_budget) is the registry's: when
// output needs room past it, finished runs' retained output goes first
// (hot and cold alike, oldest finish first; the record stays, and a reader
// asking for those bytes gets a gap), then the oldest segments of the running
// runs that retain most (make_room).
#pragma once

#include <uv.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "execd/activity.h"
#include "execd/exec/cold_records.h"
#include "execd/exec/execution.h"
#include "execd/exec/record_store.h"
#include "execd/exec/state_budget.h"
#include "nlohmann/json.hpp"
#include "protocol/list_cursor.h"
#include "protocol/packed_record.h"

namespace execd::journal {
class Journal;
}

namespace execd::exec {

struct RegistrySettings {
  std::string state_dir;
  int64_t retention_ms = 15 * 60 * 1000;
  size_t max_records = 4096;
  uint64_t log_limit = 64ull << 20;
  StateBudget::Settings budget;  // its dir: state_dir
};

class Registry {
 public:
  // How long a running command's last few output bytes may wait for the
  // disk (OutputLog's batching).
  static constexpr uint64_t kLogWriteDelayMs = 10;

  // Loads the records the state directory holds as finished executions.
  Registry(uv_loop_t* loop, RegistrySettings settings, journal::Journal& journal, Activity& activity);
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Reserves an id (a fresh random one if spec.id is empty) for a run that
  // starts now or after preparation; `log_limit` 0: the registry's.
  Execution& create(ExecutionSpec spec, uint64_t log_limit = 0);
  // A cold one is warmed (blocking reads of its index files).
  Execution* find(const std::string& id);
  // Whether the id is taken, without warming a cold one.
  bool contains(const std::string& id) const { return executions_.count(id) || cold_.find(id); }
  // What listing every execution needs, cold ones included (not warmed).
  struct Brief {
    std::string_view id;  // valid until the registry changes
    int64_t started_ns;
    bool starting, done;
  };
  template <class Fn>
  void each_brief(Fn fn) const {
    for (const auto& [id, e] : executions_) fn(Brief{id, e->started_ns(), e->starting(), e->done()});
    cold_.each([&](const ColdRecords::Entry& c) { fn(Brief{c.id, c.started_ns, false, true}); });
  }
  // A page of the inventory (GET /command): started executions (a reserved
  // one has nothing to show yet), only running or only finished ones when
  // `running` says, those after `after`, in start order, at most `limit`;
  // `more` when more follow.
  std::vector<Brief> page(std::optional<bool> running, const std::optional<protocol::ListPosition>& after,
                          size_t limit, bool& more) const;
  // Execution::summary_json of any execution (a cold one is not warmed).
  std::optional<nlohmann::ordered_json> summary_json(const std::string& id, bool with_content);
  // Finished executions at least `min_age_ms` old that nothing uses go
  // cold; how many went.
  size_t cool(int64_t min_age_ms);
  size_t cold() const { return cold_.size(); }
  // Executions not finished yet (reserved or running).
  size_t running() const { return running_; }
  // Running ones of a kind (started, not finished).
  size_t running_of(Kind k) const { return running_kind_[static_cast<int>(k)]; }
  // Readers streaming an execution that are not its original response.
  size_t readers() const { return readers_; }
  void count_reader(int delta) { readers_ = static_cast<size_t>(static_cast<int64_t>(readers_) + delta); }
  // Shutdown: `sig` to every running execution.
  void signal_all(int sig);
  // Refuses new starts from now on (shutdown).
  void stop_accepting() { accepting_ = false; }
  bool accepting() const { return accepting_; }
  // Stops the sweep, lets go of every runner and writes the records that
  // wait (daemon exit). The registry may be destroyed once the loop has run
  // dry after this (a record batch may still be out until then).
  void close();

  // --- for executions ---
  uv_loop_t* loop() const { return loop_; }
  const std::string& state_dir() const { return settings_.state_dir; }
  const std::string& boot_id() const { return records_.boot_id(); }
  RecordStore& records() { return records_; }
  WriteDelay& write_delay() { return write_delay_; }
  StateBudget& budget() { return budget_; }
  const StateBudget& budget() const { return budget_; }
  void journal_append(const nlohmann::ordered_json& entry);
  Activity& activity() { return activity_; }
  void started(Execution& e);
  void finished(Execution& e);
  // A reserved execution that never ran: forgotten (frees it).
  void forget(Execution& e);

 private:
  void sweep();
  Execution* warm(const std::string& id);
  void drop_cold(const ColdRecords::Entry& c);
  void make_room(uint64_t bytes);
  uint64_t evict_cold(const std::string& id);
  std::optional<protocol::StoredExecution> unpack(const ColdRecords::Entry& c);

  uv_loop_t* loop_;
  RegistrySettings settings_;
  journal::Journal& journal_;
  Activity& activity_;
  // Before the logs that count against it.
  StateBudget budget_;
  RecordStore records_;
  // Before the executions: their logs leave it as they go.
  WriteDelay write_delay_;
  std::map<std::string, std::unique_ptr<Execution>> executions_;
  ColdRecords cold_;
  // Cold records are packed (~1 KiB -> ~200 bytes) against a record of
  // this boot (protocol/packed_record); made with the first cold record, so
  // an idle execd has not touched the encoder's code.
  std::optional<protocol::RecordPacker> packer_;
  const protocol::RecordPacker& packer();
  // Finished executions, oldest first, for the sweep (pointers: only the
  // sweep erases a finished execution, from the front).
  std::deque<Execution*> finished_order_;
  size_t running_ = 0;
  size_t running_kind_[kKindCount] = {};
  size_t readers_ = 0;
  // Some finished run may still have output to let go of (make_room).
  bool finished_output_ = true;
  uint64_t sweep_period_ = 1000;
  uv_timer_t sweep_timer_;
  bool accepting_ = true;
  bool closed_ = false;
};

}  // namespace execd::exec
