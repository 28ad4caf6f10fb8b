// execd/exec/record_store: execution records on disk, so that a restarted
// execd (or one resumed from a paused root filesystem) still answers for
// every execution within retention. One append-only log, <state>/records.log,
// of entries as protocol/execution_record encodes them, the last entry of an
// id winning.
//
// Writing: records wait in order and go to the threadpool as one job at a
// time, up to kBatch per job (one write, one fdatasync). A batch starts
// kDelayMs after the previous one ended (or after the first record of a
// quiet spell; at once when a full one waits), so a short command's start
// and end go out as one entry. A record that changes while it waits is
// written once, as it is when its job starts. A batch the disk refuses
// (full) is kept: its records wait and go again every second, and at close,
// so nothing the API reported as finished comes back lost after a restart
// because the disk was full for a while. The log is rewritten
// (temporary file, fsync, rename) at start-up and whenever it holds more
// than twice the records kept plus 512 entries.
//
// Loading (at start-up, before the loop serves anyone, so blocking reads are
// fine): the log and the per-record files of older execds, each record's
// retained output (exec/output_log), and for a record that was still running
// the end of its process group, if its leader is still the same process.
//
// The store never owns executions: a queued one is pinned (its persist
// state says so, see Execution::in_use), so the registry does not free it.
#pragma once

#include <uv.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "execd/exec/output_log.h"
#include "protocol/execution_record.h"

namespace execd::exec {

class Execution;

class RecordStore {
 public:
  static constexpr size_t kBatch = 32;
  static constexpr uint64_t kDelayMs = 20;

  // `kept_ids`: the ids still kept (compaction drops every other one);
  // `kept_count`: how many, asked for every batch (the set only when a
  // compaction is due: building it for each batch grew with the records
  // kept, ~4% of the loop's CPU per command with 1,500 of them).
  RecordStore(uv_loop_t* loop, std::string state_dir, std::function<std::set<std::string>()> kept_ids,
              std::function<size_t()> kept_count);
  ~RecordStore();
  RecordStore(const RecordStore&) = delete;
  RecordStore& operator=(const RecordStore&) = delete;

  // The kernel's boot id (read once, at construction).
  const std::string& boot_id() const { return boot_id_; }

  struct Loaded {
    protocol::StoredExecution record;
    std::unique_ptr<OutputLog> log;
  };
  // Start-up: every record within `retention_ms` (lost ones marked so and
  // their process groups ended), oldest finish first; rewrites the log
  // with them. `log_limit` is each reloaded log's.
  std::vector<Loaded> load(int64_t retention_ms, uint64_t log_limit);

  // Queues a write of `e`'s record (pinning it until written).
  void persist(Execution& e);
  // Daemon exit: writes what waits, now; later persists go at once.
  void flush();
  void close();
  // Executions whose latest record is not on disk because writing it failed.
  size_t unsaved() const { return failing_ ? queue_.size() + in_flight_items_ : 0; }

 private:
  struct Batch;
  void schedule();
  void write_next();
  void batch_done(Batch& b);

  uv_loop_t* loop_;
  std::string dir_;
  std::string boot_id_;
  std::function<std::set<std::string>()> kept_ids_;
  std::function<size_t()> kept_count_;
  std::deque<Execution*> queue_;
  bool in_flight_ = false;
  size_t in_flight_items_ = 0;
  bool closed_ = false;
  bool failing_ = false;  // the last batch failed: the next waits a second
  // The records log: used by one batch job at a time, never by the loop.
  int log_fd_ = -1;
  uint64_t log_size_ = 0;
  size_t log_entries_ = 0;
  uv_timer_t timer_;
};

// Field 22 of /proc/<pid>/stat: the process's start time in clock ticks.
uint64_t process_start_ticks(int64_t pid);

}  // namespace execd::exec
