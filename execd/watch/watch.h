// execd/watch: file-change watches on the loop. A Watch is one inotify
// instance following one root (and, recursively, every directory below it,
// including directories made or moved in later); the Hub owns every watch,
// finds them by (root, recursive) so that feeds and change tracking share
// them, numbers their events, enforces the limits and lets a watch nobody
// reads go after --watch-retention.
//
// An event's way: the kernel queues a record; the loop reads it (the inotify
// descriptor is polled like a socket) into the watch's raw queue, noting
// which actors (execd/activity) were active since the previous read; the
// loop resolves records in order into changes (watch descriptor -> path,
// rename pairs, writes coalesced per file for --watch-coalesce or until the
// file is closed); a pool job looks at each change (lstat; for a new
// directory, inotify_add_watch on it and everything it already holds, which
// then become `create` events too); back on the loop each change gets the
// next seq, its NDJSON line goes into the ring (newest --watch-ring-bytes
// kept) and to the taps (change tracking), and followers (feeds) are woken.
// Resolution waits while a job is out, so a directory's watch is installed
// before any later record is resolved against it.
//
// Kernel overflow (IN_Q_OVERFLOW), or more raw records waiting than execd
// keeps, becomes a `gap` event with its own seq, and a recursive watch then
// rescans its tree for directories it missed. The root moved elsewhere is
// followed: a pool job finds where it is now (through its file handle),
// one `rename` event with `root` says so, and every later path carries the
// new name (the watch is found under it from then on). The root removed or
// unmounted, or moved where it cannot be named, ends the watch with a
// `gone` event.
//
// A watch may be made inside an isolated session's mount namespace: then
// every path of it is the session's (its pool work runs in a
// pty::MountScope), and the kernel reports changes made through the
// session's overlays and binds as they happen there. Such a watch keeps the
// namespace alive; Hub::end_namespace ends its watches when the session goes.
//
// Ownership: the Hub owns watches (unique_ptr). Feeds and trackers hold a
// lease (acquire/release); a leased watch is never freed. A watch with a
// job on the pool finishes closing when the job is back. Loop thread only.
#pragma once

#include <uv.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "execd/activity.h"
#include "fs/watch_scan.h"
#include "protocol/errors.h"
#include "protocol/watch.h"

namespace execd::pty {
struct MountNamespace;
}

namespace execd::watch {

using MountRef = std::shared_ptr<const pty::MountNamespace>;

struct Settings {
  size_t max_watches = 32;
  size_t ring_bytes = 1 << 20;
  size_t max_dirs = 16384;
  uint64_t retention_ms = 10 * 60 * 1000;
  uint64_t coalesce_ms = 50;
};

// The actors active while an event was queued (see execd/activity).
using Actors = std::shared_ptr<const std::vector<std::string>>;

// Receives every event as it is recorded (change tracking).
class Tap {
 public:
  virtual ~Tap() = default;
  virtual void on_event(const protocol::WatchEvent& e, const Actors& actors) = 0;
};

// A feed: new events are in the ring, or the watch has ended.
class Follower {
 public:
  virtual ~Follower() = default;
  virtual void on_events() = 0;
};

class Hub;

class Watch {
 public:
  Watch(Hub& hub, std::string root, bool recursive, uint64_t start_seq, MountRef mount);
  ~Watch();
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;

  const std::string& root() const { return root_; }
  bool recursive() const { return recursive_; }
  bool ready() const { return state_ == State::ready || state_ == State::gone; }
  // The root went away (removed, moved, unmounted): no more events.
  bool gone() const { return state_ == State::gone; }
  // Every event with a seq above floor() is in the ring or still to come;
  // those at or below it are not (never seen: before start_seq(); or let go).
  uint64_t floor() const { return floor_; }
  uint64_t start_seq() const { return start_seq_; }
  // The newest event's seq (floor() when there is none).
  uint64_t last_seq() const { return last_seq_; }
  size_t directories() const { return dirs_.size(); }
  size_t ring_bytes() const { return ring_bytes_; }

  // Appends the lines of events with seq > `after` (at least one if there
  // is one, then up to `max_bytes`); returns the seq of the last appended,
  // or `after` when none is.
  uint64_t read(uint64_t after, size_t max_bytes, std::string& out) const;

  // Calls `done` once every record the kernel had queued when this was
  // called has become an event (coalesced writes included), or at once if
  // the watch has ended.
  void settle(std::function<void()> done);

  void follow(Follower* f) { followers_.insert(f); }
  void unfollow(Follower* f) { followers_.erase(f); }
  void tap(Tap* t) { taps_.insert(t); }
  void untap(Tap* t) { taps_.erase(t); }
  void acquire() { ++leases_; }
  void release();
  size_t leases() const { return leases_; }
  size_t followers() const { return followers_.size(); }

 private:
  friend class Hub;
  enum class State { scanning, ready, gone, failed };
  struct Raw {
    int32_t wd;
    uint32_t mask;
    uint32_t cookie;
    std::string name;
    Actors actors;
  };
  struct Change {
    protocol::WatchKind kind = protocol::WatchKind::create;
    std::string path, from;
    protocol::EntryType entry = protocol::EntryType::unknown;
    bool moved = false;
    bool look = true;          // lstat it on the pool
    bool scan = false;         // a new directory (recursive): watch it and what is below
    bool list = false;         // ... and report what it already holds
    bool root_moved = false;   // the root was renamed: find where it is now
    std::string reason;
    Actors actors;
    // pool results
    protocol::EntryStat st;
    fs::TreeScan scanned;
    std::vector<protocol::EntryStat> listed;  // stat of each scanned.entries
  };
  struct Pending {
    uint64_t due = 0;
    bool write = false, attrib = false;
    protocol::EntryType entry = protocol::EntryType::unknown;
    std::set<std::string> actors;
  };
  struct Settle {
    uint64_t target;
    bool flushed = false;
    std::function<void()> done;
  };

  // Hub side.
  int open_inotify();  // 0 or -errno
  void start_scan(std::function<void(std::optional<protocol::ApiError>)> done);
  void close();        // frees itself (through the hub) once its handles and job are done

  void on_readable();
  void read_all();
  void pump();
  void resolve();
  void flush_pending(const std::string& path);
  void flush_due(bool all);
  void forget_subtree(const std::string& path, bool unwatch);
  void rekey_subtree(const std::string& from, const std::string& to);
  void push_change(Change c);
  void start_job();
  void job_done(std::vector<Change>& batch);
  void record(protocol::WatchEvent& e, const Actors& actors);
  void arm_timer();
  void check_settled();
  void end_watch(const std::string& reason);
  void stop_reading();
  void finish_close();
  Actors merge_actors(const std::set<std::string>& names) const;

  Hub& hub_;
  std::string root_;
  bool recursive_;
  MountRef mount_;  // null: execd's own namespace
  State state_ = State::scanning;
  int fd_ = -1;
  int root_wd_ = -1;
  std::string root_handle_;  // the root's file handle: where it is after a rename
  uv_poll_t poll_{};
  uv_timer_t timer_{};
  bool handles_open_ = false, polling_ = false, closing_ = false, job_ = false;
  bool ending_ = false;       // the root went: the last events go out, then `gone`
  bool closed_done_ = false;  // handles closed; freed when the last lease goes
  int open_handles_ = 0;
  uint64_t epoch_at_last_read_ = 0;

  std::deque<Raw> raw_;
  std::vector<Change> batch_;
  std::unordered_map<int, std::string> dirs_;  // wd -> path
  std::map<std::string, int> wds_;             // path -> wd
  std::map<std::string, Pending> pending_;     // coalescing writes and attribute changes
  bool overflowed_ = false;                    // a gap is queued; a rescan follows
  bool dir_limit_reported_ = false;

  struct Entry {
    uint64_t seq;
    std::string line;
  };
  std::deque<Entry> ring_;
  size_t ring_bytes_ = 0;
  uint64_t start_seq_, floor_, last_seq_;
  uint64_t read_count_ = 0, resolved_count_ = 0;
  std::vector<Settle> settles_;
  std::vector<std::function<void(std::optional<protocol::ApiError>)>> waiters_;  // for the first scan

  std::set<Follower*> followers_;
  std::set<Tap*> taps_;
  size_t leases_ = 0;
  uint64_t unleased_since_ms_ = 0;
};

class Hub {
 public:
  Hub(uv_loop_t* loop, Settings settings, Activity& activity);
  ~Hub();
  Hub(const Hub&) = delete;
  Hub& operator=(const Hub&) = delete;

  // Finds or makes the watch of `path` (resolved on the pool: `$VAR`, `~`,
  // symlinks) and calls `done` on the loop: with the watch, acquired for
  // the caller (who releases it), once its first scan is done; or with the
  // error (the limit on watches is checked before anything is made). With
  // `mount`, `path` is resolved and watched inside that mount namespace.
  using Opened = std::function<void(Watch*, std::optional<protocol::ApiError>)>;
  void open(const std::string& path, bool recursive, Opened done, MountRef mount = nullptr);
  // The namespace's session ended: its watches end (`gone`) and let go of it.
  void end_namespace(const pty::MountNamespace* mount);

  uint64_t next_seq() { return ++seq_; }
  uint64_t current_seq() const { return seq_; }
  size_t count() const { return watches_.size(); }
  size_t followers() const;
  uv_loop_t* loop() const { return loop_; }
  const Settings& settings() const { return settings_; }
  Activity& activity() { return activity_; }
  void close();

 private:
  friend class Watch;
  struct OpenJob;
  void opened(OpenJob& job);
  void forget(Watch* w);   // the watch's handles are closed: free it
  void detach(Watch* w);   // off the key map (gone or failed): new opens make a new one
  void rekey(Watch* w);    // its root was renamed: found under the new name
  void sweep();
  bool evict_one();

  uv_loop_t* loop_;
  Settings settings_;
  Activity& activity_;
  uint64_t seq_;
  std::map<std::tuple<const pty::MountNamespace*, std::string, bool>, Watch*> by_key_;
  std::vector<std::unique_ptr<Watch>> watches_;
  uv_timer_t sweep_timer_{};
  bool closed_ = false;
  size_t opening_ = 0;  // resolve jobs out
};

}  // namespace execd::watch
