// execd/exec/record_store: see header.
#include "execd/exec/record_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include "execd/clock.h"
#include "execd/exec/execution.h"
#include "fs/atomic_file.h"
#include "fs/pool_job.h"
#include "fs/small_file.h"

namespace execd::exec {

namespace {

// The records log. One file, so a write creates no inode and renames
// nothing: a file per record (write, fsync, rename, then an fsync of the
// directory) was a quarter of all CPU time in the /command round trip on
// ext4 without a journal, whose every inode allocation scans past the
// inodes freed in the last 30 s.
constexpr const char* kRecordsLog = "records.log";

// Each entry of `text` in order: fn(entry, record), record nullopt for one
// that does not decode (a torn tail, an edit); the scan then goes on from
// the next line.
template <class Fn>
void for_each_entry(std::string_view text, Fn fn) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t first = text.find('\n', pos);
    size_t second = first == std::string_view::npos ? first : text.find('\n', first + 1);
    std::string_view entry = text.substr(pos, second == std::string_view::npos ? second : second + 1 - pos);
    auto r = second == std::string_view::npos ? std::nullopt : protocol::decode_stored_execution(entry);
    fn(entry, r);
    if (r) pos = second + 1;
    else if (first == std::string_view::npos) break;
    else pos = first + 1;
  }
}

// Writes `text` as the whole records log (temporary file, fsync, rename,
// fsync of the directory); the new log's descriptor, for appending, or -1
// with errno.
int replace_log(const std::string& dir, std::string_view text) {
  std::string path = dir + "/" + kRecordsLog, tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  int err = fs::write_all(fd, text);
  if (!err && fsync(fd) != 0) err = errno;
  if (!err && rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err) {
    ::close(fd);
    unlink(tmp.c_str());
    errno = err;
    return -1;
  }
  fs::fsync_directory(dir);
  return fd;
}

std::string read_boot_id() {
  std::string b = fs::read_small_file("/proc/sys/kernel/random/boot_id").value_or(std::string());
  while (!b.empty() && (b.back() == '\n' || b.back() == ' ')) b.pop_back();
  return b;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The id whose retained output `name` holds ("<id>.output", "<id>.index",
// "<id>.output.<k>", "<id>.index.<k>"), or "".
std::string output_file_owner(const std::string& name) {
  std::string stem = name;
  size_t dot = stem.rfind('.');
  if (dot != std::string::npos && dot + 1 < stem.size() &&
      std::all_of(stem.begin() + static_cast<long>(dot) + 1, stem.end(), ::isdigit))
    stem.resize(dot);
  for (std::string_view ext : {".output", ".index"})
    if (ends_with(stem, ext)) return stem.substr(0, stem.size() - ext.size());
  return "";
}

}  // namespace

uint64_t process_start_ticks(int64_t pid) {
  std::string stat = fs::read_small_file("/proc/" + std::to_string(pid) + "/stat").value_or(std::string());
  size_t close_paren = stat.rfind(')');
  if (close_paren == std::string::npos) return 0;
  // Fields from 3 (state) on, one space apart; starttime is field 22.
  size_t at = close_paren + 2;
  for (int i = 3; i < 22 && at < stat.size(); ++i) {
    at = stat.find(' ', at);
    if (at == std::string::npos) return 0;
    ++at;
  }
  return at < stat.size() ? std::strtoull(stat.c_str() + at, nullptr, 10) : 0;
}

// One pool job writes a batch of records (queue order): one append and one
// fdatasync; with `compact`, the log is rewritten with the last entry of
// each kept id first.
struct RecordStore::Batch {
  struct Item {
    Execution* execution;           // pinned while the batch is out
    protocol::StoredExecution record;  // a copy: encoded on the pool
  };
  RecordStore* store;
  std::string dir;
  int fd;         // the log, open for appending
  uint64_t size;  // its length: a failed append is cut back to it
  std::vector<Item> items;
  std::optional<std::set<std::string>> compact;
  // results
  int err = 0;
  int new_fd = -1;  // after a rewrite (the old descriptor is closed)
  uint64_t new_size = 0;
  size_t entries = 0;  // after a rewrite: entries in the new log

  static void compact_log(Batch& b, const std::string& appended) {
    std::string old = fs::read_small_file(b.dir + "/" + kRecordsLog, SIZE_MAX).value_or(std::string());
    std::map<std::string, std::string_view> last;
    for_each_entry(old, [&](std::string_view entry, const std::optional<protocol::StoredExecution>& r) {
      if (r && b.compact->count(r->id)) last[r->id] = entry;
    });
    for (const auto& item : b.items) last.erase(item.record.id);
    std::string text;
    for (const auto& [id, entry] : last) text += entry;
    b.entries = last.size() + b.items.size();
    text += appended;
    int fd = replace_log(b.dir, text);
    if (fd < 0) return;  // the old log stays and takes the append
    ::close(b.fd);
    b.new_fd = fd;
    b.new_size = text.size();
  }

  static void run(Batch& b) {
    std::string text;
    for (auto& item : b.items) {
      // Read here, not at spawn: /proc/<pid>/stat waits while the child is
      // still inside execve, which held the loop for up to 2 ms per start.
      protocol::StoredExecution& r = item.record;
      if (!r.finished && r.pgid > 0 && r.start_ticks == 0) r.start_ticks = process_start_ticks(r.pgid);
      text += protocol::encode_stored_execution(r);
    }
    if (b.compact) {
      compact_log(b, text);
      if (b.new_fd >= 0) return;
    }
    b.new_size = b.size;
    if (b.fd < 0) {
      b.err = EBADF;
      return;
    }
    b.err = fs::write_all(b.fd, text);
    if (b.err) {
      // Whole entries only: what went out of this one is cut.
      if (ftruncate(b.fd, static_cast<off_t>(b.size)) != 0) {}
      return;
    }
    b.new_size = b.size + text.size();
    if (fdatasync(b.fd) != 0) b.err = errno;
  }
};

RecordStore::RecordStore(uv_loop_t* loop, std::string state_dir, std::function<std::set<std::string>()> kept_ids,
                         std::function<size_t()> kept_count)
    : loop_(loop),
      dir_(std::move(state_dir)),
      boot_id_(read_boot_id()),
      kept_ids_(std::move(kept_ids)),
      kept_count_(std::move(kept_count)) {
  uv_timer_init(loop, &timer_);
  timer_.data = this;
}

RecordStore::~RecordStore() {
  if (log_fd_ >= 0) ::close(log_fd_);
}

std::vector<RecordStore::Loaded> RecordStore::load(int64_t retention_ms, uint64_t log_limit) {
  std::vector<Loaded> loaded;
  DIR* d = opendir(dir_.c_str());
  if (!d) return loaded;
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) names.emplace_back(e->d_name);
  closedir(d);
  size_t torn = 0, lost = 0, expired = 0;
  int64_t now = unix_ns();
  // The log, the last entry of an id winning; then the files of one record
  // each that an execd before the log wrote (read once, then in the log).
  std::map<std::string, protocol::StoredExecution> stored_by_id;
  std::string log_text = fs::read_small_file(dir_ + "/" + kRecordsLog, SIZE_MAX).value_or(std::string());
  for_each_entry(log_text, [&](std::string_view entry, std::optional<protocol::StoredExecution>& r) {
    if (r) stored_by_id[r->id] = std::move(*r);
    else if (!entry.empty() && entry[0] == '{') ++torn;  // a crash mid-append; the rewrite below drops it
  });
  std::string().swap(log_text);
  std::vector<std::string> legacy;
  for (const std::string& name : names) {
    if (name.rfind("session-", 0) == 0 && ends_with(name, ".sh")) {
      unlink((dir_ + "/" + name).c_str());  // a bash session's run script; sessions do not survive restarts
      continue;
    }
    if (ends_with(name, ".record.tmp") || name == std::string(kRecordsLog) + ".tmp") {
      unlink((dir_ + "/" + name).c_str());  // a write that never finished
      continue;
    }
    if (!ends_with(name, ".record")) continue;
    legacy.push_back(dir_ + "/" + name);
    std::string id = name.substr(0, name.size() - 7);
    auto stored = protocol::decode_stored_execution(fs::read_small_file(dir_ + "/" + name).value_or(std::string()));
    if (!stored || stored->id != id) {
      ++torn;  // its output goes below, with that of every record not kept
      continue;
    }
    stored_by_id.emplace(id, std::move(*stored));  // the log's entry is newer
  }
  std::set<std::string> known;
  std::string kept;  // the log as rewritten: one entry per record kept
  for (auto& [id, stored] : stored_by_id) {
    auto log = std::make_unique<OutputLog>(loop_, dir_ + "/" + id, log_limit);
    log->adopt(names);
    if (!stored.finished) {
      // It was running when execd went away: end its process group (if the
      // same process still leads it) and say so.
      ++lost;
      if (stored.pgid > 0 && stored.boot_id == boot_id_ && stored.start_ticks != 0 &&
          process_start_ticks(stored.pgid) == stored.start_ticks) {
        spdlog::warn("{} {} was running when execd stopped: ending its process group {}", stored.kind, id,
                     stored.pgid);
        kill(-static_cast<pid_t>(stored.pgid), SIGKILL);
      }
      stored.lost = true;
      stored.finished = true;
      stored.finished_ns = now;
      protocol::ExecutionResult r;
      r.start_error = "lost: execd stopped while the command was running";
      r.stdout_bytes = log->index().stored(0);
      r.stderr_bytes = log->index().stored(1);
      stored.result = r;
    }
    if (now - stored.finished_ns >= retention_ms * 1000000) {
      ++expired;
      log->remove();
      continue;
    }
    known.insert(id);
    kept += protocol::encode_stored_execution(stored);
    loaded.push_back({std::move(stored), std::move(log)});
  }
  // Start-up rewrites the log: a torn tail goes (appends would otherwise
  // follow it), expired records go, and the per-record files are in it now.
  log_fd_ = replace_log(dir_, kept);
  if (log_fd_ < 0) {
    spdlog::warn("cannot write the records log {}/{}: {}; records will not survive a restart", dir_, kRecordsLog,
                 strerror(errno));
  } else {
    log_size_ = kept.size();
    log_entries_ = loaded.size();
    for (const std::string& path : legacy) unlink(path.c_str());
  }
  // Output and index files whose record is gone (swept while execd was down,
  // or a record that never got written).
  for (const std::string& name : names) {
    std::string owner = output_file_owner(name);
    if (!owner.empty() && !known.count(owner)) unlink((dir_ + "/" + name).c_str());
  }
  std::sort(loaded.begin(), loaded.end(),
            [](const Loaded& a, const Loaded& b) { return a.record.finished_ns < b.record.finished_ns; });
  if (!loaded.empty() || torn || expired)
    spdlog::info("state dir {}: {} execution records reloaded ({} lost), {} expired, {} torn records skipped", dir_,
                 loaded.size(), lost, expired, torn);
  return loaded;
}

void RecordStore::persist(Execution& e) {
  Execution::PersistState& p = e.persist_state();
  if (p.queued) return;  // encoded when its batch starts: the latest state goes
  if (p.writing) {
    p.dirty = true;
    return;
  }
  p.queued = true;
  queue_.push_back(&e);
  schedule();
}

// A batch starts kDelayMs after the previous one ended (or after the first
// record of a quiet spell), unless a full one waits: a short command ends
// within that time, and its start and end go out as one entry (half the
// log, and one fdatasync for many records).
void RecordStore::schedule() {
  if (in_flight_ || queue_.empty()) return;
  if (closed_ || (queue_.size() >= kBatch && !failing_)) return write_next();
  if (uv_is_active(reinterpret_cast<uv_handle_t*>(&timer_))) return;
  uv_timer_start(
      &timer_, [](uv_timer_t* t) { static_cast<RecordStore*>(t->data)->write_next(); }, failing_ ? 1000 : kDelayMs,
      0);
}

void RecordStore::write_next() {
  if (in_flight_) return;
  if (!closed_) uv_timer_stop(&timer_);
  auto batch = std::make_unique<Batch>(Batch{this, dir_, log_fd_, log_size_, {}, {}});
  while (!queue_.empty() && batch->items.size() < kBatch) {
    Execution* e = queue_.front();
    queue_.pop_front();
    Execution::PersistState& p = e->persist_state();
    p.queued = false;
    p.writing = true;
    p.dirty = false;
    batch->items.push_back({e, e->stored()});
  }
  if (batch->items.empty()) return;
  // Entries of records since swept, and the older entries of every record,
  // go when the log holds more than twice what is kept (plus some slack, so
  // a few records are not rewritten over and over).
  if (kept_ids_ && log_entries_ + batch->items.size() > 2 * kept_count_() + 512) batch->compact = kept_ids_();
  in_flight_ = true;
  in_flight_items_ = batch->items.size();
  fs::queue_job<Batch>(loop_, std::move(batch), Batch::run, [](Batch& b, int) { b.store->batch_done(b); });
}

void RecordStore::batch_done(Batch& b) {
  in_flight_ = false;
  in_flight_items_ = 0;
  if (b.new_fd >= 0) {
    log_fd_ = b.new_fd;
    log_entries_ = b.entries;
  } else if (!b.err) {
    log_entries_ += b.items.size();
  }
  log_size_ = b.new_size;
  if (b.err && !failing_)
    spdlog::warn("cannot write {} execution records to {}/{}: {}; they wait and are written once it works again",
                 b.items.size(), b.dir, kRecordsLog, strerror(b.err));
  if (!b.err && failing_) spdlog::info("execution records are written again");
  failing_ = b.err != 0;
  // At exit a refused batch is not tried again and again: its records, and
  // what still waits, are said to be lost from the log.
  const bool give_up = closed_ && b.err;
  for (auto& item : b.items) {
    Execution& e = *item.execution;
    e.set_start_ticks(item.record.start_ticks);
    Execution::PersistState& p = e.persist_state();
    p.writing = false;
    // A record the disk refused waits for the next batch, as it is then.
    if (!give_up && (p.dirty || b.err)) {
      p.dirty = false;
      persist(e);
    }
  }
  if (give_up) {
    spdlog::error("{} execution records could not be written to {}/{}: a restart will not know how they ended",
                  b.items.size() + queue_.size(), dir_, kRecordsLog);
    for (Execution* e : queue_) e->persist_state().queued = false;
    queue_.clear();
    return;
  }
  schedule();
}

void RecordStore::flush() {
  closed_ = true;
  uv_timer_stop(&timer_);
  write_next();
}

void RecordStore::close() {
  flush();
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
}

}  // namespace execd::exec
