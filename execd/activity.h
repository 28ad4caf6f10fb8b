// execd/activity: who is active in the sandbox, as far as execd can know,
// and when the last output, input and request happened. Owned by the
// Daemon; the execution registry reports runs starting and ending (an
// "actor" each, by execution id), processes report output and input, the
// route table reports requests. Two readers:
//
//  * GET /activity (execd/api/pause), for a busy/idle verdict;
//  * track_changes (execd/watch, exec/track_changes): a change the kernel queued
//    while another actor was active may be that actor's. Each inotify read
//    asks which actors were active at any time since the previous read
//    (`active_since`), so a run's list can mark exactly those entries.
//
// Actors execd cannot see are not here: processes it did not start, and
// background jobs of an idle bash session or kernel (only their runs are).
// Extra actors that are not runs (PTY sessions, file work through the API,
// processes a finished command left behind) come from a probe the daemon
// installs, asked at read time. Loop thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace execd {

class Activity {
 public:
  // An epoch counts starts and ends; `active_since(e)` answers for the span
  // from epoch `e` to now.
  uint64_t epoch() const { return epoch_; }
  void begin(const std::string& actor);
  void end(const std::string& actor);
  // Actors active at any time since `epoch` (now included), plus what the
  // probe reports now; "?" when that span is older than what is kept.
  std::vector<std::string> active_since(uint64_t epoch) const;
  size_t active_count() const { return active_.size(); }
  void set_probe(std::function<void(std::vector<std::string>&)> probe) { probe_ = std::move(probe); }

  // Times in Unix milliseconds (0: never).
  void note_output(int64_t now_ms) { last_output_ms_ = now_ms; }
  void note_input(int64_t now_ms) { last_input_ms_ = now_ms; }
  void note_request(int64_t now_ms) { last_request_ms_ = now_ms; }
  int64_t last_output_ms() const { return last_output_ms_; }
  int64_t last_input_ms() const { return last_input_ms_; }
  int64_t last_request_ms() const { return last_request_ms_; }

 private:
  // The changes kept (`active_since` answers "?" for a span older than the
  // oldest): at most kKeptChanges, their actors' names in kNameBytes.
  static constexpr size_t kKeptChanges = 1024;
  static constexpr size_t kNameBytes = 48 * 1024;
  // A longer name is kept as its first kMaxName bytes (execution ids, the
  // only actors that begin and end, are at most 128).
  static constexpr size_t kMaxName = 255;
  struct Change {
    uint64_t epoch;  // after the change
    uint32_t at;     // the actor's name: names_[at, at + len)
    uint32_t len;
  };
  void record(const std::string& actor);
  void drop_oldest();
  std::string_view name(const Change& c) const { return {names_.get() + c.at, c.len}; }

  uint64_t epoch_ = 0;
  std::multiset<std::string> active_;
  // Rings allocated once, at construction (left uninitialised, so their
  // pages are touched only as they fill), never resized: a change is kept
  // for hundreds of commands, and a string allocated per change (two per
  // command) landed among each command's transient allocations, where 1,000
  // of them pinned ~500 heap pages after a burst of 500 commands.
  std::unique_ptr<Change[]> changes_{new Change[kKeptChanges]};
  size_t first_ = 0, count_ = 0;  // changes_[first_] is the oldest
  std::unique_ptr<char[]> names_{new char[kNameBytes]};
  size_t names_head_ = 0;  // where the next name goes (FIFO with the changes)
  std::function<void(std::vector<std::string>&)> probe_;
  int64_t last_output_ms_ = 0, last_input_ms_ = 0, last_request_ms_ = 0;
};

}  // namespace execd
