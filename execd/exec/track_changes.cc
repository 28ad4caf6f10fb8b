// execd/exec/track_changes: see header.
#include "execd/exec/track_changes.h"

#include "fs/pool_job.h"
#include "fs/watch_scan.h"
#include "pty/namespaces.h"

namespace execd::exec {

ChangeTracker::ChangeTracker(watch::Hub& hub, TrackLimits limits, watch::MountRef mount)
    : hub_(hub), limits_(limits), mount_(std::move(mount)), set_(limits.max_entries) {}

ChangeTracker::~ChangeTracker() {
  for (watch::Watch* w : watches_) {
    w->untap(this);
    w->release();
  }
}

void ChangeTracker::open(watch::Hub& hub, std::vector<std::string> roots, TrackLimits limits, Ready ready,
                         watch::MountRef mount) {
  struct Opening {
    std::unique_ptr<ChangeTracker> tracker;
    size_t waiting = 0;
    std::optional<protocol::ApiError> error;
    Ready ready;
  };
  auto state = std::make_shared<Opening>();
  state->tracker.reset(new ChangeTracker(hub, limits, mount));
  state->ready = std::move(ready);
  state->tracker->roots_ = roots;
  state->waiting = roots.size();
  auto opened = [state](watch::Watch* w, std::optional<protocol::ApiError> err) {
    if (w) {
      state->tracker->watches_.push_back(w);
      w->tap(state->tracker.get());
    } else if (!state->error) {
      state->error = std::move(err);
    }
    if (--state->waiting > 0) return;
    if (state->error) {
      state->tracker.reset();  // lets go of the watches it got
      return state->ready(nullptr, std::move(state->error));
    }
    state->ready(std::move(state->tracker), std::nullopt);
  };
  for (const auto& root : roots) hub.open(root, true, opened, mount);
}

void ChangeTracker::begin(const std::string& self) {
  self_ = self;
  counting_ = true;
}

void ChangeTracker::on_event(const protocol::WatchEvent& e, const watch::Actors& actors) {
  if (!counting_) return;
  bool concurrent = false;
  for (const auto& a : *actors) {
    if (a == self_) continue;
    concurrent = true;
    others_.insert(a == "?" ? "unknown (active longer ago than execd remembers)" : a);
  }
  set_.add(e, concurrent);
}

void ChangeTracker::finish(std::function<void(std::shared_ptr<const protocol::ChangeSummary>)> done) {
  done_ = std::move(done);
  settling_ = watches_.size() + 1;
  std::weak_ptr<int> alive = alive_;
  for (watch::Watch* w : watches_)
    w->settle([this, alive] {
      if (!alive.expired()) settled();
    });
  settled();
}

void ChangeTracker::settled() {
  if (--settling_ > 0) return;
  counting_ = false;
  // The final state of each path, on the pool.
  struct LookJob {
    std::weak_ptr<int> alive;
    ChangeTracker* tracker;
    uint64_t hash_max;
    watch::MountRef mount;
    std::shared_ptr<protocol::ChangeSummary> summary;
  };
  auto summary = std::make_shared<protocol::ChangeSummary>();
  summary->roots = roots_;
  summary->entries = set_.take();
  summary->dropped = set_.dropped();
  summary->overflow = set_.overflow();
  summary->error = set_.error();
  summary->concurrent_runs.assign(others_.begin(), others_.end());
  fs::queue_job<LookJob>(
      hub_.loop(), std::make_unique<LookJob>(LookJob{alive_, this, limits_.hash_max_bytes, mount_, std::move(summary)}),
      [](LookJob& j) {
        pty::MountScope scope(j.mount.get());
        if (scope.error()) return;  // the entries keep no stat (the session is gone)
        for (auto& c : j.summary->entries) {
          if (c.op == protocol::ChangeOp::removed) continue;
          c.stat = fs::stat_for_watch(c.path);
          if (c.stat.exists && c.stat.type == protocol::EntryType::file) {
            bool too_large = false;
            c.sha256 = fs::sha256_of_file(c.path, j.hash_max, too_large);
            c.hash_skipped = too_large;
          }
        }
      },
      [](LookJob& j, int) {
        if (j.alive.expired()) return;
        auto done = std::move(j.tracker->done_);
        if (done) done(std::move(j.summary));
      });
}

}  // namespace execd::exec
