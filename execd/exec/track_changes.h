// execd/exec/track_changes: track_changes, a feature of every execution (command,
// session run, code run): what changed under the given roots while the run
// ran. A ChangeTracker taps a recursive watch per root (execd/watch, shared
// with feeds), folds their events into a protocol::ChangeSet while the run
// is on, and when the run ends settles each watch (every record the kernel
// had queued by then becomes an event), then looks at each path's final
// state on the threadpool (lstat; SHA-256 of files up to
// --track-hash-max-bytes). The Execution puts the summary into its result,
// so the terminal event, the status, the record and the journal entry all
// carry it.
//
// Attribution is by time: an entry is marked `concurrent` when another
// actor (another run, a PTY session, file work through the API, processes
// a finished command left) was active while one of its events was queued;
// `concurrent_runs` names them. execd does not see which process made a
// change (fanotify could say, with CAP_SYS_ADMIN and a kernel that reports
// pids for directory events; see docs/api.md), nor processes it did not
// start.
//
// Ownership: the Execution owns its tracker; the tracker holds a lease on
// each watch. Callbacks that may outlive it (settles, the pool job) check a
// token first. Loop thread only.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "execd/watch/watch.h"
#include "protocol/changes.h"
#include "protocol/errors.h"

namespace execd::exec {

struct TrackLimits {
  size_t max_entries = 1000;
  uint64_t hash_max_bytes = 16ull << 20;
};

class ChangeTracker final : public watch::Tap {
 public:
  using Ready = std::function<void(std::unique_ptr<ChangeTracker>, std::optional<protocol::ApiError>)>;
  // Opens a recursive watch on every root (at most kMaxRoots), then calls
  // `ready` on the loop with the tracker, or the first error. With `mount`
  // (an isolated session's), the roots and every path are the session's.
  static void open(watch::Hub& hub, std::vector<std::string> roots, TrackLimits limits, Ready ready,
                   watch::MountRef mount = nullptr);
  static constexpr size_t kMaxRoots = 16;

  ~ChangeTracker() override;
  ChangeTracker(const ChangeTracker&) = delete;
  ChangeTracker& operator=(const ChangeTracker&) = delete;

  // From now on events count; `self` is the run's actor id (execution id).
  void begin(const std::string& self);
  // The run ended: settles every watch, looks at the final states, then
  // `done` with the summary (on the loop).
  void finish(std::function<void(std::shared_ptr<const protocol::ChangeSummary>)> done);

  // watch::Tap
  void on_event(const protocol::WatchEvent& e, const watch::Actors& actors) override;

 private:
  ChangeTracker(watch::Hub& hub, TrackLimits limits, watch::MountRef mount);
  void settled();

  watch::Hub& hub_;
  TrackLimits limits_;
  watch::MountRef mount_;
  std::vector<std::string> roots_;
  std::vector<watch::Watch*> watches_;  // leased
  protocol::ChangeSet set_;
  std::string self_;
  std::set<std::string> others_;
  bool counting_ = false;
  size_t settling_ = 0;
  std::function<void(std::shared_ptr<const protocol::ChangeSummary>)> done_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace execd::exec
