// protocol/changes: "what a run changed" (track_changes), as the terminal
// event and the journal entry carry it. Pure: ChangeSet folds the watch
// events seen while a run ran into one entry per path (a file created and
// written is "created"; created and removed is nothing; a directory renamed
// carries the entries below it along), bounded by a count; ChangeSummary is
// the result once execd has looked at each path's final state (fs/), and
// changes_json its one JSON form.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string_view>
#include <unordered_set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/watch.h"

namespace execd::protocol {

enum class ChangeOp : uint8_t { created, modified, removed, renamed };
const char* change_op_name(ChangeOp op);

struct ChangeEntry {
  std::string path;
  ChangeOp op = ChangeOp::modified;
  std::string from;                      // renamed: the path it had before the run
  bool content_changed = false;          // renamed, and written or chmod'ed as well
  EntryType entry = EntryType::unknown;  // the kernel's word (directory or not)
  // Another run (or file work through the API) was active when an event
  // for this path was queued: the change may be theirs.
  bool concurrent = false;
  // The final state, filled in once the run ended.
  EntryStat stat;
  std::string sha256;        // regular files up to the hash limit
  bool hash_skipped = false;  // a regular file over the hash limit
};

struct ChangeSummary {
  std::vector<std::string> roots;
  std::vector<ChangeEntry> entries;  // sorted by path
  uint64_t dropped = 0;              // paths changed but not listed (past the limit)
  bool overflow = false;             // the kernel dropped events meanwhile: the list may miss some
  std::vector<std::string> concurrent_runs;  // other runs that were active while this one ran
  std::string error;                 // tracking broke (a root went away)
};

class ChangeSet {
 public:
  explicit ChangeSet(size_t max_entries) : max_(max_entries) {}
  void add(const WatchEvent& e, bool concurrent);
  size_t size() const { return recs_.size(); }
  // Distinct paths changed but not listed (counted by hash, up to a
  // million; beyond that, at least this many).
  uint64_t dropped() const { return dropped_.size(); }
  bool overflow() const { return overflow_; }
  const std::string& error() const { return error_; }
  // The entries, sorted by path (the set is empty afterwards).
  std::vector<ChangeEntry> take();

 private:
  struct Rec {
    ChangeOp op = ChangeOp::modified;
    std::string from;
    bool content = false;
    EntryType entry = EntryType::unknown;
    bool concurrent = false;
  };
  Rec* find(const std::string& path);
  // A new entry, unless the limit is reached (then counted as dropped).
  Rec* make(const std::string& path);
  void on_create(const WatchEvent& e, bool concurrent);
  void on_touch(const WatchEvent& e, bool concurrent);
  void on_remove(const WatchEvent& e, bool concurrent);
  void on_rename(const WatchEvent& e, bool concurrent);

  size_t max_;
  std::map<std::string, Rec> recs_;
  std::unordered_set<uint64_t> dropped_;
  bool overflow_ = false;
  std::string error_;
};

nlohmann::ordered_json changes_json(const ChangeSummary& s);
// Reads what changes_json wrote (a record reloaded after a restart, with
// simdjson as every input); nullopt if it is not that shape.
std::optional<ChangeSummary> decode_changes_json(std::string_view json);

}  // namespace execd::protocol
