// execd/exec/state_budget: how many bytes execd may keep in its state
// directory, and how many it keeps now. The state directory is usually on
// the disk the sandbox's user works on (a pod's writable layer), so one
// total bounds everything execd keeps there:
//
//   budget = min(--state-budget, --state-budget-percent of the filesystem,
//                what execd keeps + what is free beyond the last
//                --state-floor-percent (5%) of the filesystem)
//
// The last term moves with the user's own files: execd never takes the
// filesystem's last few percent, whoever filled the rest.
//
// What is counted: retained output (each exec/output_log reports its own
// segments, kept data file included, as it changes them; a cold record's
// bytes stay counted until it is warmed or let go of), and the files the
// state directory holds beside the logs (records.log, the journal and its
// rotated file, spool files), measured by refresh(). The journal keeps a
// reserved share (kJournalShare of the budget, at most what it can grow to):
// output may use the budget minus the larger of that share and what the
// journal holds, minus the other files.
//
// Output past its share asks make_room (the registry's) for the difference
// before it is taken: finished runs' output goes first, oldest first, then
// the oldest segments of the running runs that retain most. What make_room
// cannot free (every run is down to its open segment) is taken anyway: a
// running run never loses bytes it has not stored yet because of the
// budget, and the overshoot is at most one segment (budget/kSegmentShare)
// per running run, inside the free-space floor.
//
// Loop thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace execd::exec {

class StateBudget {
 public:
  static constexpr unsigned kJournalShare = 8;    // 1/8 of the budget at most
  static constexpr uint64_t kSegmentShare = 64;   // an output segment: 1/64 of output's share at most
  static constexpr uint64_t kRefreshMs = 100;     // statvfs and stat at most this often, unless forced

  struct Settings {
    std::string dir;
    uint64_t cap_bytes = 1ull << 30;  // 0: no absolute cap
    unsigned share_percent = 25;
    unsigned floor_percent = 5;  // of the filesystem, never taken
    uint64_t journal_max_bytes = 0;  // one journal file's rotation size; 0: no journal
  };

  explicit StateBudget(Settings s);
  StateBudget(const StateBudget&) = delete;
  StateBudget& operator=(const StateBudget&) = delete;

  // An output log's bytes on disk changed by `delta`.
  void add_output(int64_t delta);
  // A spool file (O_TMPFILE, invisible to a directory listing) grew or went.
  void add_spool(int64_t delta);
  // Output may take `more` bytes now: make_room is asked for what passes
  // output's share first (never re-entered).
  void need(uint64_t more);
  std::function<void(uint64_t bytes)> make_room;

  // Re-reads the filesystem's figures and the other files' sizes (at most
  // every kRefreshMs unless `force`).
  void refresh(bool force = false);

  uint64_t output_bytes() const { return output_; }
  uint64_t journal_bytes() const { return journal_; }
  uint64_t other_bytes() const { return records_ + spool_; }
  uint64_t used() const { return output_ + journal_ + records_ + spool_; }
  // The total budget as last refreshed.
  uint64_t limit() const { return limit_; }
  // What output may use of it.
  uint64_t output_limit() const;
  // How large one output segment should be so that running runs can shed
  // their oldest bytes in small steps.
  uint64_t segment_bytes(uint64_t log_limit) const;
  // Size of the state directory's filesystem, and bytes free on it.
  uint64_t fs_bytes() const { return fs_total_; }
  uint64_t fs_free_bytes() const { return fs_avail_; }

  // What the budget let go of (for /activity).
  void count_evicted(uint64_t bytes) { evicted_ += bytes; }
  void count_trimmed(uint64_t bytes) { trimmed_ += bytes; }
  uint64_t evicted_bytes() const { return evicted_; }
  uint64_t trimmed_bytes() const { return trimmed_; }
  // Output taken past output_limit() because nothing could go.
  uint64_t over_bytes() const { return output_ > output_limit() ? output_ - output_limit() : 0; }

 private:
  Settings s_;
  uint64_t output_ = 0, journal_ = 0, records_ = 0, spool_ = 0;
  uint64_t limit_ = 0, fs_total_ = 0, fs_avail_ = 0;
  uint64_t refreshed_ms_ = 0;
  uint64_t evicted_ = 0, trimmed_ = 0;
  bool making_room_ = false;
};

}  // namespace execd::exec
