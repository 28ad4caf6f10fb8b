// execd/watch: see header.
#include "execd/watch/watch.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "execd/clock.h"
#include "fs/paths.h"
#include "fs/pool_job.h"
#include "pty/namespaces.h"

namespace execd::watch {

namespace codes = protocol::codes;
using protocol::EntryType;
using protocol::WatchKind;

namespace {
constexpr uint32_t kMask = IN_CREATE | IN_DELETE | IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB | IN_MOVED_FROM |
                           IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF | IN_EXCL_UNLINK;
// Records waiting to be resolved before execd counts it as an overflow of
// its own (a job stuck on a slow disk must not grow memory without bound).
constexpr size_t kMaxRaw = 65536;
// Files with a write (or attribute change) being coalesced.
constexpr size_t kMaxPending = 4096;
// Entries reported for what one new directory already held.
constexpr size_t kMaxListed = 65536;
constexpr uint64_t kWatchSweepMs = 1000;

// A file handle of the directory at `path` (empty if the filesystem gives
// none). Unlike a descriptor it pins nothing: the directory's removal is
// still reported at once, and its mount can still be unmounted.
std::string handle_of(const std::string& path) {
  union {
    file_handle h;
    char bytes[sizeof(file_handle) + MAX_HANDLE_SZ];
  } buf{};
  buf.h.handle_bytes = MAX_HANDLE_SZ;
  int mount_id = 0;
  if (name_to_handle_at(AT_FDCWD, path.c_str(), &buf.h, &mount_id, 0) != 0) return {};
  return std::string(buf.bytes, sizeof(file_handle) + buf.h.handle_bytes);
}

// Where the directory with file handle `handle`, renamed away from `old`,
// is now, as this thread names paths; empty when that cannot be told (no
// CAP_DAC_READ_SEARCH for open_by_handle_at, removed since, out of this
// thread's root). Inside a session (a MountScope: the thread has its own
// working directory, and /proc there is the session's) through getcwd;
// else through /proc.
std::string where_is(const std::string& handle, const std::string& old, bool in_session) {
  std::string parent = old.substr(0, old.find_last_of('/'));
  // Not O_PATH: open_by_handle_at refuses a mount descriptor opened so.
  int mount_fd = ::open(parent.empty() ? "/" : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (mount_fd < 0) return {};
  std::string copy = handle;  // open_by_handle_at takes it non-const
  int fd = open_by_handle_at(mount_fd, reinterpret_cast<file_handle*>(copy.data()), O_PATH | O_DIRECTORY | O_CLOEXEC);
  ::close(mount_fd);
  if (fd < 0) return {};
  char buf[PATH_MAX];
  std::string path;
  if (in_session) {
    if (fchdir(fd) == 0 && getcwd(buf, sizeof buf) && buf[0] == '/') path = buf;
  } else {
    std::string link = "/proc/self/fd/" + std::to_string(fd);
    ssize_t n = readlink(link.c_str(), buf, sizeof buf);
    if (n > 0 && n < static_cast<ssize_t>(sizeof buf) && buf[0] == '/') path.assign(buf, static_cast<size_t>(n));
    constexpr std::string_view kDeleted = " (deleted)";
    if (path.size() > kDeleted.size() && path.compare(path.size() - kDeleted.size(), kDeleted.size(), kDeleted) == 0)
      path.clear();
  }
  ::close(fd);
  return path;
}
}  // namespace

// ---------------------------------------------------------------------------
// Watch

Watch::Watch(Hub& hub, std::string root, bool recursive, uint64_t start_seq, MountRef mount)
    : hub_(hub), root_(std::move(root)), recursive_(recursive), mount_(std::move(mount)), start_seq_(start_seq),
      floor_(start_seq),
      last_seq_(start_seq) {
  epoch_at_last_read_ = hub_.activity().epoch();
}

Watch::~Watch() {
  if (fd_ >= 0) ::close(fd_);
}

int Watch::open_inotify() {
  fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd_ < 0) return -errno;
  uv_loop_t* loop = hub_.loop();
  uv_poll_init(loop, &poll_, fd_);
  uv_timer_init(loop, &timer_);
  poll_.data = timer_.data = this;
  handles_open_ = true;
  open_handles_ = 2;
  // Records queue while the first scan runs; read now, resolved once it is back.
  uv_poll_start(&poll_, UV_READABLE, [](uv_poll_t* p, int status, int) {
    auto* w = static_cast<Watch*>(p->data);
    if (status == 0) w->on_readable();
  });
  polling_ = true;
  return 0;
}

void Watch::start_scan(std::function<void(std::optional<protocol::ApiError>)> done) {
  struct ScanJob {
    Watch* watch;
    int fd;
    std::string root;
    bool recursive;
    size_t max_dirs;
    MountRef mount;
    fs::TreeScan scan;
    std::string root_handle;
    std::function<void(std::optional<protocol::ApiError>)> done;
  };
  job_ = true;
  fs::queue_job<ScanJob>(
      hub_.loop(),
      std::make_unique<ScanJob>(
          ScanJob{this, fd_, root_, recursive_, hub_.settings().max_dirs, mount_, {}, {}, std::move(done)}),
      [](ScanJob& j) {
        pty::MountScope scope(j.mount.get());
        if ((j.scan.error = scope.error())) return;
        j.scan = fs::watch_tree(j.fd, j.root, kMask, j.recursive, j.max_dirs, false, 0);
        if (!j.scan.error) j.root_handle = handle_of(j.root);
      },
      [](ScanJob& j, int) {
        Watch* w = j.watch;
        w->job_ = false;
        w->root_handle_ = std::move(j.root_handle);  // empty: a renamed root ends the watch
        std::optional<protocol::ApiError> err;
        if (w->closing_) err = protocol::ApiError{503, std::string(codes::kRuntimeError), "execd is shutting down"};
        else if (j.scan.error)
          err = protocol::ApiError{j.scan.error == EACCES ? 403 : 400, std::string(codes::kInvalidRequestBody),
                                   "cannot watch " + j.root + ": " + strerror(j.scan.error)};
        else if (j.scan.dir_limit)
          err = protocol::ApiError{400, "WATCH_TOO_MANY_DIRECTORIES",
                                   "more than " + std::to_string(j.max_dirs) + " directories below " + j.root +
                                       " (--watch-max-dirs); watch a smaller tree"};
        if (err) {
          if (w->closing_) {
            w->finish_close();
          } else {
            w->state_ = State::failed;
            w->hub_.detach(w);
            w->close();
          }
          j.done(err);
          return;
        }
        for (auto& d : j.scan.dirs) {
          w->dirs_[d.wd] = d.path;
          w->wds_[d.path] = d.wd;
        }
        w->root_wd_ = j.scan.dirs.front().wd;
        w->state_ = State::ready;
        j.done(std::nullopt);
        w->pump();
      });
}

void Watch::on_readable() {
  read_all();
  pump();
}

void Watch::read_all() {
  if (fd_ < 0 || !polling_) return;
  // inotify records are 4-byte aligned; the buffer is reused (loop thread only).
  alignas(8) static uint8_t buf[64 * 1024];
  Actors actors;
  std::vector<protocol::InotifyRecord> recs;
  for (;;) {
    ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    // What was active since the previous read that found the queue empty:
    // every record here was queued within that span.
    if (!actors)
      actors = std::make_shared<const std::vector<std::string>>(hub_.activity().active_since(epoch_at_last_read_));
    recs.clear();
    protocol::parse_inotify_records(buf, static_cast<size_t>(n), recs);
    for (const auto& r : recs) {
      ++read_count_;
      if (raw_.size() >= kMaxRaw && !overflowed_) {
        // More waiting than execd keeps: an overflow of its own. What waited
        // is dropped (a gap says so) and the tree is scanned again.
        resolved_count_ += raw_.size();
        raw_.clear();
        raw_.push_back({-1, IN_Q_OVERFLOW, 0, {}, actors});
        ++read_count_;
        overflowed_ = true;
      }
      if (overflowed_ && !(r.mask & IN_Q_OVERFLOW) && raw_.size() >= kMaxRaw) {
        ++resolved_count_;  // dropped with the rest
        continue;
      }
      raw_.push_back({r.wd, r.mask, r.cookie, std::string(r.name), actors});
    }
  }
  epoch_at_last_read_ = hub_.activity().epoch();
}

Actors Watch::merge_actors(const std::set<std::string>& names) const {
  return std::make_shared<const std::vector<std::string>>(names.begin(), names.end());
}

void Watch::push_change(Change c) { batch_.push_back(std::move(c)); }

void Watch::flush_pending(const std::string& path) {
  auto it = pending_.find(path);
  if (it == pending_.end()) return;
  Pending p = std::move(it->second);
  pending_.erase(it);
  Actors actors = merge_actors(p.actors);
  if (p.write) {
    Change c;
    c.kind = WatchKind::write;
    c.path = path;
    c.entry = p.entry;
    c.actors = actors;
    push_change(std::move(c));
  }
  if (p.attrib) {
    Change c;
    c.kind = WatchKind::chmod;
    c.path = path;
    c.entry = p.entry;
    c.actors = actors;
    push_change(std::move(c));
  }
}

void Watch::flush_due(bool all) {
  uint64_t now = uv_now(hub_.loop());
  std::vector<std::string> due;
  for (const auto& [path, p] : pending_)
    if (all || p.due <= now) due.push_back(path);
  for (const auto& path : due) flush_pending(path);
}

void Watch::forget_subtree(const std::string& path, bool unwatch) {
  std::string prefix = path + "/";
  auto drop = [&](std::map<std::string, int>::iterator it) {
    if (unwatch) inotify_rm_watch(fd_, it->second);
    dirs_.erase(it->second);
    return wds_.erase(it);
  };
  if (auto it = wds_.find(path); it != wds_.end()) drop(it);
  for (auto it = wds_.lower_bound(prefix); it != wds_.end() && it->first.compare(0, prefix.size(), prefix) == 0;)
    it = drop(it);
}

void Watch::rekey_subtree(const std::string& from, const std::string& to) {
  std::vector<std::pair<std::string, int>> moved;
  std::string prefix = from + "/";
  if (auto it = wds_.find(from); it != wds_.end()) {
    moved.emplace_back(to, it->second);
    wds_.erase(it);
  }
  for (auto it = wds_.lower_bound(prefix); it != wds_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
    moved.emplace_back(to + it->first.substr(from.size()), it->second);
    it = wds_.erase(it);
  }
  for (auto& [path, wd] : moved) {
    dirs_[wd] = path;
    wds_[path] = wd;
  }
}

void Watch::resolve() {
  uint64_t now = uv_now(hub_.loop());
  while (!raw_.empty() && !closing_) {
    Raw r = std::move(raw_.front());
    raw_.pop_front();
    ++resolved_count_;
    if (r.mask & IN_Q_OVERFLOW) {
      overflowed_ = false;
      Change c;
      c.kind = WatchKind::gap;
      c.reason = "overflow";
      c.look = false;
      c.actors = r.actors;
      if (recursive_) {
        // Directories made meanwhile may have no watch yet.
        c.scan = true;
        c.path = root_;
      }
      push_change(std::move(c));
      if (recursive_) return;
      continue;
    }
    auto it = dirs_.find(r.wd);
    if (it == dirs_.end()) continue;  // a watch already forgotten
    const std::string dir = it->second;
    if (r.mask & IN_IGNORED) {
      if (r.wd == root_wd_) return end_watch("removed");
      if (auto w = wds_.find(dir); w != wds_.end() && w->second == r.wd) wds_.erase(w);
      dirs_.erase(r.wd);
      continue;
    }
    if (r.mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT)) {
      if (r.wd != root_wd_) continue;  // its parent reports it
      if (!(r.mask & IN_MOVE_SELF) || root_handle_.empty())
        return end_watch(r.mask & IN_MOVE_SELF ? "moved" : r.mask & IN_UNMOUNT ? "unmounted" : "removed");
      // Followed: later records resolve against the new name, so they wait.
      flush_due(true);
      Change c;
      c.kind = WatchKind::rename;
      c.path = c.from = root_;
      c.entry = EntryType::dir;
      c.root_moved = true;
      c.actors = r.actors;
      push_change(std::move(c));
      return;
    }
    if (r.name.empty()) continue;  // about a watched directory itself: its parent reports it
    std::string path = fs::join_path(dir, r.name);
    bool isdir = (r.mask & IN_ISDIR) != 0;
    EntryType type = isdir ? EntryType::dir : EntryType::file;

    if (r.mask & IN_CREATE) {
      flush_pending(path);
      Change c;
      c.kind = WatchKind::create;
      c.path = path;
      c.entry = type;
      c.actors = r.actors;
      c.scan = c.list = isdir && recursive_;
      bool stop = c.scan;
      push_change(std::move(c));
      if (stop) return;  // later records may be about what it holds: its watch first
      continue;
    }
    if (r.mask & (IN_MODIFY | IN_ATTRIB)) {
      if (r.mask & IN_ATTRIB) {
        // A create still waiting for its lstat reports the mode anyway.
        bool created = std::any_of(batch_.begin(), batch_.end(), [&](const Change& c) {
          return c.kind == WatchKind::create && c.path == path;
        });
        if (created && pending_.find(path) == pending_.end()) continue;
      }
      if (pending_.size() >= kMaxPending && pending_.find(path) == pending_.end()) flush_pending(pending_.begin()->first);
      Pending& p = pending_[path];
      if (!p.due) p.due = now + hub_.settings().coalesce_ms;
      if (r.mask & IN_MODIFY) p.write = true;
      else p.attrib = true;
      p.entry = type;
      for (const auto& a : *r.actors) p.actors.insert(a);
      continue;
    }
    if (r.mask & IN_CLOSE_WRITE) {
      // Written and closed: the write is reported now, not at the window's end.
      if (auto p = pending_.find(path); p != pending_.end() && p->second.write) flush_pending(path);
      continue;
    }
    if (r.mask & IN_DELETE) {
      flush_pending(path);
      Change c;
      c.kind = WatchKind::remove;
      c.path = path;
      c.entry = type;
      c.look = false;
      c.actors = r.actors;
      push_change(std::move(c));
      if (isdir) forget_subtree(path, false);
      continue;
    }
    if (r.mask & IN_MOVED_FROM) {
      flush_pending(path);
      // The kernel queues both halves of a rename at once, and everything
      // queued was read before resolving: the pair, if any, is next.
      if (!raw_.empty() && (raw_.front().mask & IN_MOVED_TO) && raw_.front().cookie == r.cookie) {
        Raw t = std::move(raw_.front());
        raw_.pop_front();
        ++resolved_count_;
        auto dt = dirs_.find(t.wd);
        if (dt != dirs_.end()) {
          std::string to = fs::join_path(dt->second, t.name);
          flush_pending(to);
          Change c;
          c.kind = WatchKind::rename;
          c.path = to;
          c.from = path;
          c.entry = type;
          std::set<std::string> names(r.actors->begin(), r.actors->end());
          names.insert(t.actors->begin(), t.actors->end());
          c.actors = merge_actors(names);
          if (isdir) {
            if (wds_.count(path)) rekey_subtree(path, to);
            else if (recursive_) c.scan = true;  // made and renamed before its watch was in place
          }
          bool stop = c.scan;
          push_change(std::move(c));
          if (stop) return;
          continue;
        }
      }
      Change c;
      c.kind = WatchKind::remove;
      c.path = path;
      c.entry = type;
      c.moved = true;
      c.look = false;
      c.actors = r.actors;
      push_change(std::move(c));
      if (isdir) forget_subtree(path, true);
      continue;
    }
    if (r.mask & IN_MOVED_TO) {
      flush_pending(path);
      Change c;
      c.kind = WatchKind::create;
      c.path = path;
      c.entry = type;
      c.moved = true;
      c.actors = r.actors;
      c.scan = isdir && recursive_;
      bool stop = c.scan;
      push_change(std::move(c));
      if (stop) return;
      continue;
    }
  }
}

void Watch::stop_reading() {
  ending_ = true;
  resolved_count_ += raw_.size();
  raw_.clear();
  if (polling_) {
    uv_poll_stop(&poll_);
    polling_ = false;
  }
}

void Watch::end_watch(const std::string& reason) {
  if (ending_) return;
  stop_reading();
  flush_due(true);
  Change c;
  c.kind = WatchKind::gone;
  c.path = root_;
  c.reason = reason;
  c.look = false;
  c.actors = std::make_shared<const std::vector<std::string>>();
  push_change(std::move(c));
}

void Watch::pump() {
  if (closing_ || job_ || state_ != State::ready) {
    if (state_ != State::ready && state_ != State::scanning) check_settled();
    return;
  }
  if (!ending_) {
    resolve();
    flush_due(false);
    // A settle whose records are all resolved: what is being coalesced goes
    // out now, so that the run it is for sees its last writes.
    for (auto& s : settles_)
      if (!s.flushed && resolved_count_ >= s.target && raw_.empty()) {
        flush_due(true);
        s.flushed = true;
      }
  }
  if (!batch_.empty()) return start_job();
  check_settled();
  arm_timer();
}

void Watch::arm_timer() {
  if (!handles_open_ || closing_) return;
  if (pending_.empty()) {
    uv_timer_stop(&timer_);
    return;
  }
  uint64_t due = UINT64_MAX;
  for (const auto& [path, p] : pending_) due = std::min(due, p.due);
  uint64_t now = uv_now(hub_.loop());
  uv_timer_start(&timer_, [](uv_timer_t* t) { static_cast<Watch*>(t->data)->pump(); }, due > now ? due - now : 0, 0);
}

void Watch::start_job() {
  struct Job {
    Watch* watch;
    int fd;
    std::string root_handle;
    size_t budget;
    MountRef mount;
    std::vector<Change> batch;
  };
  job_ = true;
  size_t budget = hub_.settings().max_dirs > dirs_.size() ? hub_.settings().max_dirs - dirs_.size() : 0;
  auto job = std::make_unique<Job>(Job{this, fd_, root_handle_, budget, mount_, std::move(batch_)});
  batch_.clear();
  for (auto& c : job->batch)
    if (c.kind == WatchKind::gap && c.scan) job->budget = hub_.settings().max_dirs;  // a rescan counts all anew
  fs::queue_job<Job>(
      hub_.loop(), std::move(job),
      [](Job& j) {
        // A namespace that cannot be entered (never seen: the session keeps
        // it) leaves each change unlooked-at, as if its entry had gone.
        pty::MountScope scope(j.mount.get());
        if (scope.error()) return;
        for (auto& c : j.batch) {
          if (c.root_moved) c.path = where_is(j.root_handle, c.from, j.mount != nullptr);
          if (c.scan) {
            c.scanned = fs::watch_tree(j.fd, c.path, kMask, true, j.budget, c.list, kMaxListed);
            j.budget -= std::min(j.budget, c.scanned.dirs.size());
            c.listed.reserve(c.scanned.entries.size());
            for (const auto& [path, type] : c.scanned.entries) c.listed.push_back(fs::stat_for_watch(path));
          }
          if (c.look && !c.path.empty()) c.st = fs::stat_for_watch(c.path);
        }
      },
      [](Job& j, int) { j.watch->job_done(j.batch); });
}

void Watch::job_done(std::vector<Change>& batch) {
  job_ = false;
  if (closing_) return finish_close();
  for (auto& c : batch) {
    if (c.scan) {
      for (const auto& d : c.scanned.dirs) {
        if (auto old = dirs_.find(d.wd); old != dirs_.end() && old->second != d.path) wds_.erase(old->second);
        dirs_[d.wd] = d.path;
        wds_[d.path] = d.wd;
      }
    }
    if (c.root_moved) {
      if (c.path.empty()) {  // moved where it has no name (out of reach, or removed since)
        stop_reading();
        c.kind = WatchKind::gone;
        c.path = c.from;
        c.from.clear();
        c.reason = "moved";
      } else if (c.path == c.from) {
        continue;  // moved again before it was looked for: the first record already found it
      } else {
        rekey_subtree(c.from, c.path);
        root_ = c.path;
        hub_.rekey(this);
      }
    }
    protocol::WatchEvent e;
    e.kind = c.kind;
    e.root = c.root_moved && c.kind == WatchKind::rename;
    e.path = c.kind == WatchKind::gap ? std::string() : c.path;
    e.from = std::move(c.from);
    e.entry = c.entry;
    e.stat = c.st;
    e.moved = c.moved;
    e.reason = c.reason;
    record(e, c.actors);
    for (size_t i = 0; i < c.scanned.entries.size() && i < c.listed.size(); ++i) {
      // What the new directory held before its watch was in place.
      protocol::WatchEvent l;
      l.kind = WatchKind::create;
      l.path = c.scanned.entries[i].first;
      l.entry = c.scanned.entries[i].second;
      l.stat = c.listed[i];
      record(l, c.actors);
    }
    if (c.scanned.dir_limit && !dir_limit_reported_) {
      dir_limit_reported_ = true;
      protocol::WatchEvent g;
      g.kind = WatchKind::gap;
      g.reason = "directory limit (--watch-max-dirs " + std::to_string(hub_.settings().max_dirs) +
                 "): changes in " + c.scanned.first_unwatched + " and other new directories are not seen";
      record(g, c.actors);
    }
  }
  if (ending_) {
    state_ = State::gone;
    hub_.detach(this);
  }
  auto followers = followers_;  // a follower may leave while told
  for (Follower* f : followers)
    if (followers_.count(f)) f->on_events();
  pump();
}

void Watch::record(protocol::WatchEvent& e, const Actors& actors) {
  e.seq = hub_.next_seq();
  e.ts_ms = unix_ms();
  std::string line;
  protocol::encode_watch_event(line, e);
  ring_bytes_ += line.size();
  ring_.push_back({e.seq, std::move(line)});
  last_seq_ = e.seq;
  while (ring_bytes_ > hub_.settings().ring_bytes && ring_.size() > 1) {
    ring_bytes_ -= ring_.front().line.size();
    floor_ = ring_.front().seq;
    ring_.pop_front();
  }
  static const Actors kNone = std::make_shared<const std::vector<std::string>>();
  auto taps = taps_;
  for (Tap* t : taps)
    if (taps_.count(t)) t->on_event(e, actors ? actors : kNone);
}

uint64_t Watch::read(uint64_t after, size_t max_bytes, std::string& out) const {
  auto it = std::upper_bound(ring_.begin(), ring_.end(), after,
                             [](uint64_t a, const Entry& e) { return a < e.seq; });
  uint64_t last = after;
  for (; it != ring_.end(); ++it) {
    if (last != after && out.size() + it->line.size() > max_bytes) break;
    out += it->line;
    last = it->seq;
  }
  return last;
}

void Watch::settle(std::function<void()> done) {
  if (state_ != State::ready || closing_) return done();
  read_all();
  settles_.push_back({read_count_, false, std::move(done)});
  pump();
}

void Watch::check_settled() {
  bool over = closing_ || state_ == State::gone || state_ == State::failed;
  std::vector<std::function<void()>> ready;
  for (auto it = settles_.begin(); it != settles_.end();) {
    if (over || (it->flushed && !job_ && batch_.empty())) {
      ready.push_back(std::move(it->done));
      it = settles_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& f : ready) f();
}

void Watch::release() {
  if (leases_ > 0) --leases_;
  if (leases_ == 0) {
    unleased_since_ms_ = uv_now(hub_.loop());
    if (closed_done_) hub_.forget(this);  // frees this
  }
}

void Watch::close() {
  if (closing_) return;
  closing_ = true;
  if (polling_) {
    uv_poll_stop(&poll_);
    polling_ = false;
  }
  hub_.detach(this);
  // Waiters of a first scan and settles hear it now.
  check_settled();
  if (!job_) finish_close();
}

void Watch::finish_close() {
  if (!handles_open_) {
    closed_done_ = true;
    if (leases_ == 0) hub_.forget(this);
    return;
  }
  handles_open_ = false;
  auto closed = [](uv_handle_t* h) {
    auto* w = static_cast<Watch*>(h->data);
    if (--w->open_handles_ > 0) return;
    ::close(w->fd_);
    w->fd_ = -1;
    w->closed_done_ = true;
    if (w->leases_ == 0) w->hub_.forget(w);  // frees w
  };
  uv_close(reinterpret_cast<uv_handle_t*>(&poll_), closed);
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), closed);
}

// ---------------------------------------------------------------------------
// Hub

Hub::Hub(uv_loop_t* loop, Settings settings, Activity& activity)
    : loop_(loop), settings_(settings), activity_(activity) {
  // Seqs go on from execd's start time in microseconds, so that a seq a
  // client kept from before a restart is never taken for a later one.
  seq_ = static_cast<uint64_t>(unix_ns() / 1000);
  uv_timer_init(loop, &sweep_timer_);
  sweep_timer_.data = this;
  uv_timer_start(&sweep_timer_, [](uv_timer_t* t) { static_cast<Hub*>(t->data)->sweep(); }, kWatchSweepMs, kWatchSweepMs);
  uv_unref(reinterpret_cast<uv_handle_t*>(&sweep_timer_));
}

Hub::~Hub() = default;

size_t Hub::followers() const {
  size_t n = 0;
  for (const auto& w : watches_) n += w->followers();
  return n;
}

struct Hub::OpenJob {
  Hub* hub;
  std::string given;
  bool recursive;
  Opened done;
  MountRef mount;
  fs::ResolvedRoot root;
};

void Hub::open(const std::string& path, bool recursive, Opened done, MountRef mount) {
  if (closed_) return done(nullptr, protocol::ApiError{503, std::string(codes::kRuntimeError), "execd is shutting down"});
  ++opening_;
  fs::queue_job<OpenJob>(
      loop_, std::make_unique<OpenJob>(OpenJob{this, path, recursive, std::move(done), std::move(mount), {}}),
      [](OpenJob& j) {
        pty::MountScope scope(j.mount.get());
        if (int e = scope.error()) {
          j.root.status = 500;
          j.root.error = std::string("cannot enter the session's mount namespace: ") + strerror(e);
          return;
        }
        j.root = fs::resolve_watch_root(j.given);
      },
      [](OpenJob& j, int) { j.hub->opened(j); });
}

void Hub::opened(OpenJob& j) {
  --opening_;
  if (closed_) return j.done(nullptr, protocol::ApiError{503, std::string(codes::kRuntimeError), "execd is shutting down"});
  if (!j.root.error.empty()) {
    std::string_view code = j.root.status == 404   ? codes::kFileNotFound
                            : j.root.status == 403 ? codes::kPermissionDenied
                                                   : codes::kInvalidRequestBody;
    return j.done(nullptr, protocol::ApiError{j.root.status, std::string(code), j.root.error});
  }
  auto key = std::make_tuple(j.mount.get(), j.root.path, j.recursive);
  Opened done = std::move(j.done);
  auto on_ready = [](Watch* w, Opened done) {
    return [w, done = std::move(done)](std::optional<protocol::ApiError> err) {
      if (err) {
        w->release();
        return done(nullptr, std::move(err));
      }
      done(w, std::nullopt);
    };
  };
  if (auto it = by_key_.find(key); it != by_key_.end()) {
    Watch* w = it->second;
    w->acquire();
    if (w->ready()) return done(w, std::nullopt);
    w->waiters_.push_back(on_ready(w, std::move(done)));
    return;
  }
  // The limit first, before an inotify instance is taken: a watch nobody
  // has read for a while may make room.
  if (by_key_.size() >= settings_.max_watches && !evict_one())
    return done(nullptr, protocol::ApiError{429, "LIMIT_REACHED",
                                            "execd already keeps " + std::to_string(settings_.max_watches) +
                                                " watches (--max-watches); close a feed or wait for one to expire"});
  auto w = std::make_unique<Watch>(*this, j.root.path, j.recursive, seq_, std::move(j.mount));
  if (int rc = w->open_inotify(); rc != 0) {
    std::string why = rc == -EMFILE ? " (the inotify instances of this user are used up: "
                                      "/proc/sys/fs/inotify/max_user_instances)"
                                    : "";
    return done(nullptr, protocol::ApiError{503, std::string(codes::kRuntimeError),
                                            std::string("cannot create an inotify instance: ") + strerror(-rc) + why});
  }
  Watch* raw = w.get();
  watches_.push_back(std::move(w));
  by_key_[key] = raw;
  raw->acquire();
  raw->waiters_.push_back(on_ready(raw, std::move(done)));
  raw->start_scan([raw](std::optional<protocol::ApiError> err) {
    auto waiters = std::move(raw->waiters_);
    raw->waiters_.clear();
    for (auto& f : waiters) f(err);
  });
}

bool Hub::evict_one() {
  Watch* oldest = nullptr;
  for (const auto& w : watches_)
    if (w->leases_ == 0 && !w->closing_ && (!oldest || w->unleased_since_ms_ < oldest->unleased_since_ms_))
      oldest = w.get();
  if (!oldest) return false;
  oldest->close();
  return true;
}

void Hub::detach(Watch* w) {
  for (auto it = by_key_.begin(); it != by_key_.end(); ++it)
    if (it->second == w) {
      by_key_.erase(it);
      return;
    }
}

void Hub::end_namespace(const pty::MountNamespace* mount) {
  std::vector<Watch*> theirs;
  for (const auto& w : watches_)
    if (w->mount_.get() == mount && !w->closing_) theirs.push_back(w.get());
  for (Watch* w : theirs) {
    detach(w);
    if (w->leases_ == 0 || w->state_ != Watch::State::ready) {
      w->close();  // its followers and waiters hear it; the lessees let go
    } else {
      w->end_watch("session ended");
      w->pump();
    }
  }
}

void Hub::rekey(Watch* w) {
  detach(w);
  by_key_.emplace(std::make_tuple(w->mount_.get(), w->root_, w->recursive_), w);  // unless one is there already
}

void Hub::forget(Watch* w) {
  for (auto it = watches_.begin(); it != watches_.end(); ++it)
    if (it->get() == w) {
      watches_.erase(it);
      return;
    }
}

void Hub::sweep() {
  uint64_t now = uv_now(loop_);
  std::vector<Watch*> expired;
  for (const auto& w : watches_) {
    if (w->leases_ > 0 || w->closing_ || w->state_ == Watch::State::scanning) continue;
    bool ended = w->state_ == Watch::State::gone || w->state_ == Watch::State::failed;
    if (ended || now - w->unleased_since_ms_ >= settings_.retention_ms) expired.push_back(w.get());
  }
  for (Watch* w : expired) w->close();
}

void Hub::close() {
  if (closed_) return;
  closed_ = true;
  uv_timer_stop(&sweep_timer_);
  uv_close(reinterpret_cast<uv_handle_t*>(&sweep_timer_), nullptr);
  std::vector<Watch*> all;
  for (const auto& w : watches_) all.push_back(w.get());
  for (Watch* w : all) w->close();
}

}  // namespace execd::watch
