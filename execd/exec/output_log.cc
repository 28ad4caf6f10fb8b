// execd/exec/output_log: see header.
#include "execd/exec/output_log.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "execd/exec/state_budget.h"
#include "fs/pool_job.h"
#include "fs/small_file.h"

namespace execd::exec {

namespace {

// Writes `len` bytes at `offset`; 0 or an errno.
int pwrite_all(int fd, const char* data, size_t len, uint64_t offset) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::pwrite(fd, data + done, len - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    done += static_cast<size_t>(n);
  }
  return 0;
}

// Closing a file can wait on the disk, so it goes to the pool, and so do
// unlinks (a burst of commands ends hundreds of logs at once).
// `truncate_to` >= 0 cuts the file there first (a reused file's old tail).
void close_on_pool(uv_loop_t* loop, int fd, int64_t truncate_to = -1) {
  if (fd < 0) return;
  struct CloseJob {
    int fd;
    int64_t truncate_to;
  };
  fs::queue_job<CloseJob>(
      loop, std::make_unique<CloseJob>(CloseJob{fd, truncate_to}),
      [](CloseJob& j) {
        if (j.truncate_to >= 0) (void)::ftruncate(j.fd, static_cast<off_t>(j.truncate_to));
        ::close(j.fd);
      },
      [](CloseJob&, int) {});
}

void unlink_on_pool(uv_loop_t* loop, std::vector<std::string> paths) {
  struct UnlinkJob {
    std::vector<std::string> paths;
  };
  fs::queue_job<UnlinkJob>(
      loop, std::make_unique<UnlinkJob>(UnlinkJob{std::move(paths)}),
      [](UnlinkJob& j) {
        for (const auto& p : j.paths) ::unlink(p.c_str());
      },
      [](UnlinkJob&, int) {});
}

}  // namespace

// One write of a segment's waiting bytes and index entries, on the pool.
// The writer's in-flight buffers stay untouched by the loop until `done`.
struct OutputLog::WriteJob {
  OutputLog* log;
  Writer* writer;
  std::string data_path, index_path;
  int data_fd, index_fd;
  bool create;
  std::string reuse_path;  // a dropped segment's data file to take over, or ""
  int err = 0;
  bool reused = false;

  static void run(WriteJob& j) {
    Writer& w = *j.writer;
    if (j.create) {
      if (!j.reuse_path.empty()) {
        if (::rename(j.reuse_path.c_str(), j.data_path.c_str()) == 0) {
          j.data_fd = ::open(j.data_path.c_str(), O_RDWR | O_CLOEXEC);
          j.reused = j.data_fd >= 0;
        } else {
          ::unlink(j.reuse_path.c_str());
        }
      }
      if (j.data_fd < 0) j.data_fd = ::open(j.data_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (j.data_fd < 0) return void(j.err = errno);
      j.index_fd = ::open(j.index_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (j.index_fd < 0) return void(j.err = errno);
    }
    j.err = pwrite_all(j.data_fd, w.data_inflight.data(), w.data_inflight.size(), w.data_durable);
    if (!j.err) j.err = pwrite_all(j.index_fd, w.index_inflight.data(), w.index_inflight.size(), w.index_durable);
  }
  static void done(WriteJob& j, int) { j.log->on_write_done(j); }
};

// A read, on the pool, by path (the writer's descriptors belong to its
// write jobs alone), of consecutive pieces of one or more segment files. A
// file let go meanwhile ends the read there.
struct OutputLog::ReadJob {
  struct Piece {
    std::string path;
    uint64_t offset;  // within the file
    size_t len;
  };
  OutputLog* log;
  std::vector<Piece> pieces;
  std::string buf;
  ReadFn fn;
  int err = 0;

  static void run(ReadJob& r) {
    size_t total = 0;
    for (const auto& p : r.pieces) total += p.len;
    r.buf.resize(total);
    size_t got = 0;
    for (const auto& p : r.pieces) {
      int fd = ::open(p.path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        if (errno != ENOENT) r.err = -errno;
        break;
      }
      size_t done = 0;
      while (done < p.len) {
        ssize_t k = ::pread(fd, r.buf.data() + got + done, p.len - done, static_cast<off_t>(p.offset + done));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) r.err = -errno;
        if (k <= 0) break;
        done += static_cast<size_t>(k);
      }
      ::close(fd);
      got += done;
      if (done < p.len || r.err) break;
    }
    r.buf.resize(got);
  }
  static void done(ReadJob& r, int) {
    OutputLog& log = *r.log;
    --log.ops_;
    --log.reads_;
    r.fn(r.err, r.err ? std::string() : std::move(r.buf));
    if (log.removed_) log.remove();
    else log.pump();
  }
};

WriteDelay::WriteDelay(uv_loop_t* loop, uint64_t period_ms) : period_ms_(period_ms) {
  uv_timer_init(loop, &timer_);
  timer_.data = this;
}

bool WriteDelay::add(OutputLog& log) {
  if (closed_) return false;
  logs_.push_back(&log);
  if (!uv_is_active(reinterpret_cast<uv_handle_t*>(&timer_)))
    uv_timer_start(&timer_, [](uv_timer_t* t) { static_cast<WriteDelay*>(t->data)->fire(); }, period_ms_, 0);
  return true;
}

void WriteDelay::remove(OutputLog& log) {
  auto it = std::find(logs_.begin(), logs_.end(), &log);
  if (it != logs_.end()) logs_.erase(it);
}

void WriteDelay::fire() {
  std::vector<OutputLog*> due;
  due.swap(logs_);
  for (OutputLog* log : due) {
    log->delayed_ = false;
    log->write_due_ = true;
    log->pump();
  }
}

void WriteDelay::close() {
  if (closed_) return;
  closed_ = true;
  fire();
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
}

void OutputLog::Bytes::reserve(size_t n) {
  if (n <= cap_) return;
  std::unique_ptr<char[]> grown(new char[n]);  // not zeroed: only [0, size) is ever read
  if (size_) std::memcpy(grown.get(), bytes_.get(), size_);
  bytes_ = std::move(grown);
  cap_ = n;
}

void OutputLog::Bytes::append(const uint8_t* p, size_t n) {
  reserve(size_ + n);
  std::memcpy(end(), p, n);
  size_ += n;
}

void OutputLog::Bytes::swap(Bytes& o) noexcept {
  std::swap(bytes_, o.bytes_);
  std::swap(size_, o.size_);
  std::swap(cap_, o.cap_);
}

void OutputLog::Bytes::release() {
  bytes_.reset();
  size_ = cap_ = 0;
}

OutputLog::OutputLog(uv_loop_t* loop, std::string base, uint64_t limit, WriteDelay* delay)
    : loop_(loop),
      base_(std::move(base)),
      limit_(limit),
      segment_bytes_(std::max<uint64_t>(1, limit / 4 + (limit % 4 != 0))),
      delay_(delay) {}

OutputLog::~OutputLog() {
  cancel_delay();
  for (auto& w : writers_) {
    if (w->data_fd >= 0) ::close(w->data_fd);
    if (w->index_fd >= 0) ::close(w->index_fd);
  }
}

std::string OutputLog::segment_file(const std::string& prefix, const char* ext, uint32_t k) {
  return k == 0 ? prefix + ext : prefix + ext + "." + std::to_string(k);
}

std::string OutputLog::data_path(uint32_t k) const { return segment_file(base_, ".output", k); }

std::string OutputLog::index_path(uint32_t k) const { return segment_file(base_, ".index", k); }

bool OutputLog::adopt(const std::vector<std::string>& names) {
  // Which segments are there: "<id>.output" is 0, "<id>.output.<k>" is k.
  std::string stem = base_.substr(base_.rfind('/') + 1) + ".output";
  std::set<uint32_t> ks;
  for (const auto& n : names) {
    if (n == stem) ks.insert(0);
    else if (n.size() > stem.size() + 1 && n.compare(0, stem.size() + 1, stem + ".") == 0) {
      std::string rest = n.substr(stem.size() + 1);
      if (!rest.empty() && rest.size() < 10 && std::all_of(rest.begin(), rest.end(), ::isdigit))
        ks.insert(static_cast<uint32_t>(std::stoul(rest)));
    }
  }
  sealed_ = true;
  std::vector<std::string> stray;
  bool broken = false;
  for (uint32_t k : ks) {
    struct stat st {};
    std::string data = data_path(k);
    // A data file without its index is a dropped segment kept for reuse.
    std::optional<std::string> idx;
    if (!broken) idx = fs::read_small_file(index_path(k), SIZE_MAX);
    if (!idx || stat(data.c_str(), &st) != 0) {
      stray.push_back(data);
      stray.push_back(index_path(k));
      continue;
    }
    uint64_t before = index_.end();
    if (!index_.decode_segment(*idx, static_cast<uint64_t>(st.st_size))) {
      broken = true;  // a hole: what follows cannot be placed
      stray.push_back(data);
      stray.push_back(index_path(k));
      continue;
    }
    uint64_t start = segments_.empty() ? index_.first() : before;
    segments_.push_back({k, start, index_.end() - start});
    next_k_ = k + 1;
  }
  for (const auto& p : stray) ::unlink(p.c_str());
  return !segments_.empty();
}

OutputLog::Writer& OutputLog::writer_for_new_bytes() {
  if (segments_.empty() || segments_.back().size >= segment_bytes_) roll_over();
  uint32_t k = segments_.back().k;
  if (writers_.empty() || writers_.back()->k != k) {
    auto w = std::make_unique<Writer>();
    w->k = k;
    // A stream rolling over: the next segment's buffers start at the size
    // the last one's reached, not grown again (copying) from nothing.
    if (!writers_.empty()) {
      const Writer& last = *writers_.back();
      w->last_writes[0] = last.last_writes[0];
      w->last_writes[1] = last.last_writes[1];
      if (last.streaming()) {
        size_t cap = std::max(last.data.capacity(), last.data_inflight.capacity());
        w->data.reserve(cap);
        w->data_inflight.reserve(cap);
      }
    }
    w->index = protocol::OutputIndex::encode_header(index_.position());
    writers_.push_back(std::move(w));
  }
  return *writers_.back();
}

void OutputLog::roll_over() { segments_.push_back({next_k_++, index_.end(), 0}); }

// Waiting bytes reach the budget plus one read (the producer pauses after
// the append that passes it). Doubling would take a buffer from 1 MiB to
// 2 MiB, where malloc maps it, and a streaming command would then map,
// fault in and unmap that buffer every time the writer caught up: grown in
// one step to what the budget needs instead, it stays on the heap and is
// reused.
void OutputLog::grow_for(Bytes& buf, size_t more) {
  size_t need = buf.size() + more;
  if (need <= buf.capacity()) return;
  constexpr size_t kCap = kPendingBudget + (512u << 10);
  buf.reserve(std::max(need, std::min(buf.capacity() * 2, kCap)));
}

void OutputLog::append(uint8_t channel, const uint8_t* data, size_t len) {
  if (sealed_ || failed_ || removed_) return;
  while (len > 0) {
    if (segments_.empty() || segments_.back().size >= segment_bytes_) roll_over();
    uint64_t take = std::min<uint64_t>(len, segment_bytes_ - segments_.back().size);
    // Room for it: the oldest segments go, unless a reader still needs them.
    while (retained() + take > limit_ && segments_.size() > 1) {
      uint64_t upto = segments_[1].start;
      if (guard_ && !guard_(upto)) break;
      drop_oldest();
    }
    if (budget_) {
      // The open segment is new when it holds nothing yet: its files count.
      budget_->need(take + (segments_.back().size == 0 ? kSegmentOverhead : 0));
      if (removed_) return;
    }
    Writer& w = writer_for_new_bytes();
    // Consecutive bytes of one channel share an index entry while it waits.
    if (w.open_entry != std::string::npos && static_cast<uint8_t>(w.index[w.open_entry]) == channel) {
      uint64_t merged = 0;
      for (int i = 0; i < 8; ++i)
        merged |= static_cast<uint64_t>(static_cast<uint8_t>(w.index[w.open_entry + 1 + i])) << (8 * i);
      w.index.replace(w.open_entry, protocol::OutputIndex::kEntryBytes,
                      protocol::OutputIndex::encode_entry(channel, merged + take));
    } else {
      w.open_entry = w.index.size();
      w.index += protocol::OutputIndex::encode_entry(channel, take);
    }
    if (data == reinterpret_cast<const uint8_t*>(w.data.end()) && take <= w.data.room()) {
      w.data.commit(static_cast<size_t>(take));  // read into room(): already in place
    } else {
      grow_for(w.data, static_cast<size_t>(take));
      w.data.append(data, static_cast<size_t>(take));
    }
    index_.add(channel, take);
    segments_.back().size += take;
    waiting_ += take;
    data += take;
    len -= static_cast<size_t>(take);
    sync_budget();
  }
  pump();
}

// Only in the open segment's own writer and only for what the segment still
// takes, so that bytes read here are appended where they lie (a roll-over
// or a new writer would copy them).
std::span<uint8_t> OutputLog::room() {
  if (sealed_ || failed_ || removed_ || segments_.empty() || writers_.empty()) return {};
  Writer& w = *writers_.back();
  if (w.k != segments_.back().k) return {};
  // A quiet log's few bytes are copied: room is kept only while streaming.
  if (!w.streaming() && w.data.room() < kMinRoom) return {};
  uint64_t left = segment_bytes_ - std::min(segment_bytes_, segments_.back().size);
  size_t want = static_cast<size_t>(std::min<uint64_t>(left, kRoomBytes));
  if (want < kMinRoom) return {};
  grow_for(w.data, want);
  return {reinterpret_cast<uint8_t*>(w.data.end()), want};
}

void OutputLog::trim() {
  while (retained() > limit_ && segments_.size() > 1) {
    if (guard_ && !guard_(segments_[1].start)) return;
    drop_oldest();
  }
}

void OutputLog::drop_oldest() {
  Segment s = segments_.front();
  segments_.erase(segments_.begin());
  index_.drop_before(segments_.empty() ? index_.end() : segments_.front().start);
  for (auto it = writers_.begin(); it != writers_.end(); ++it) {
    if ((*it)->k != s.k) continue;
    Writer& w = **it;
    waiting_ -= w.data.size();
    w.drop_waiting();
    if (writing_ && it == writers_.begin()) {
      unlink_when_written_.push_back(s.k);  // its write is out: after it
      sync_budget();
      return;
    }
    close_writer(w);
    writers_.erase(it);
    break;
  }
  // Kept for the next segment instead of unlinked: overwriting a file's
  // cached pages costs a quarter of what a new file's do (its pages and
  // blocks are allocated already, and nothing frees them). Unless a read by
  // path may still be out: it must find the old bytes or no file.
  if (!sealed_ && !spare_ && reads_ == 0) {
    spare_ = s.k;
    spare_bytes_ = s.size;
    unlink_on_pool(loop_, {index_path(s.k)});
    sync_budget();
    return;
  }
  unlink_segment(s.k);
  sync_budget();
}

void OutputLog::unlink_segment(uint32_t k) { unlink_on_pool(loop_, {data_path(k), index_path(k)}); }

void OutputLog::drop_spare() {
  if (!spare_) return;
  unlink_on_pool(loop_, {data_path(*spare_)});
  spare_.reset();
  spare_bytes_ = 0;
  sync_budget();
}

uint64_t OutputLog::disk_bytes() const {
  uint64_t n = spare_ ? spare_bytes_ + kSegmentOverhead / 2 : 0;
  for (const auto& s : segments_) n += s.size + kSegmentOverhead;
  return n;
}

void OutputLog::sync_budget() {
  if (!budget_) return;
  uint64_t now = disk_bytes();
  budget_->add_output(static_cast<int64_t>(now) - static_cast<int64_t>(charged_));
  charged_ = now;
}

void OutputLog::set_budget(StateBudget* budget) {
  budget_ = budget;
  charged_ = 0;
  if (!budget_) return;
  if (!sealed_ && segments_.empty()) segment_bytes_ = std::max<uint64_t>(1, budget_->segment_bytes(limit_));
  sync_budget();
}

uint64_t OutputLog::evict() {
  if (!sealed_ || !writers_.empty() || removed_ || segments_.empty()) return 0;
  uint64_t before = disk_bytes();
  std::vector<std::string> paths;
  for (const auto& s : segments_) {
    paths.push_back(data_path(s.k));
    paths.push_back(index_path(s.k));
  }
  if (spare_) paths.push_back(data_path(*spare_));
  spare_.reset();
  spare_bytes_ = 0;
  segments_.clear();
  // Every offset stays where it was: a reader from any of them gets a gap.
  index_.drop_before(index_.end());
  unlink_on_pool(loop_, std::move(paths));
  sync_budget();
  return before - disk_bytes();
}

uint64_t OutputLog::shed_oldest() {
  if (removed_ || segments_.size() < 2) return 0;
  uint64_t before = disk_bytes();
  drop_oldest();
  uint64_t after = disk_bytes();
  return before > after ? before - after : 0;
}

std::optional<uint64_t> OutputLog::oldest_segment_end() const {
  if (segments_.size() < 2) return std::nullopt;
  return segments_[1].start;
}

void OutputLog::close_writer(Writer& w) {
  close_on_pool(loop_, w.data_fd, w.reused ? static_cast<int64_t>(w.data_durable) : -1);
  close_on_pool(loop_, w.index_fd);
  w.data_fd = w.index_fd = -1;
}

void OutputLog::seal() {
  sealed_ = true;
  drop_spare();
  pump();
}

// A few waiting bytes of a running log's one open segment wait for the
// delay; the first write (it makes the files), a second writer, a waiting
// read, the seal and a delay that ran out do not.
bool OutputLog::delay_write() {
  if (!delay_ || write_due_ || sealed_ || !waiting_reads_.empty() || waiting_ >= kWriteBatch || writers_.size() != 1)
    return false;
  const Writer& w = *writers_.front();
  if (!w.created || w.data.empty()) return false;
  if (!delayed_) delayed_ = delay_->add(*this);
  return delayed_;
}

void OutputLog::cancel_delay() {
  if (delayed_) delay_->remove(*this);
  delayed_ = false;
}

void OutputLog::pump() {
  if (writing_ || removed_ || delay_write()) return;
  while (!writers_.empty()) {
    Writer& w = *writers_.front();
    if (!w.data.empty() || (!w.created && !w.index.empty())) {
      cancel_delay();
      write_due_ = false;
      w.data_inflight.swap(w.data);
      w.index_inflight.swap(w.index);
      w.data.clear();
      w.index.clear();
      w.open_entry = std::string::npos;
      waiting_ -= w.data_inflight.size();
      inflight_ += w.data_inflight.size();
      writing_ = true;
      ++ops_;
      bool create = !w.created;
      w.created = true;
      auto job = std::make_unique<WriteJob>(WriteJob{this, &w, create ? data_path(w.k) : std::string(),
                                                     create ? index_path(w.k) : std::string(), w.data_fd, w.index_fd,
                                                     create, {}});
      if (create && spare_) {
        job->reuse_path = data_path(*spare_);
        spare_.reset();
        spare_bytes_ = 0;  // the new segment's bytes are counted as they come
        sync_budget();
      }
      fs::queue_job<WriteJob>(loop_, std::move(job), WriteJob::run, WriteJob::done);
      return;
    }
    // Caught up. A writer that takes no more appends closes its files; the
    // current one keeps them, and gives back its buffers' memory unless
    // output is streaming (its last writes were large): a stream would
    // otherwise grow both buffers again, copying, after every catch-up.
    bool current = !sealed_ && !segments_.empty() && segments_.back().k == w.k;
    if (current && w.streaming()) return;
    w.data_inflight.release();
    std::string().swap(w.index_inflight);
    if (current) {
      w.data.release();
      std::string().swap(w.index);
      return;
    }
    close_writer(w);
    writers_.erase(writers_.begin());
  }
}

void OutputLog::on_write_done(WriteJob& job) {
  --ops_;
  writing_ = false;
  Writer& w = *job.writer;
  if (job.create) {
    w.data_fd = job.data_fd;
    w.index_fd = job.index_fd;
    w.reused = job.reused;
  }
  inflight_ -= w.data_inflight.size();
  w.last_writes[0] = w.last_writes[1];
  w.last_writes[1] = w.data_inflight.size();
  if (job.err) {
    // Not durable: the bytes of this write and everything after it. The
    // file may hold part of them; readers never look past the durable end.
    uint64_t seg_start = 0;
    for (const auto& s : segments_)
      if (s.k == w.k) seg_start = s.start;
    if (!failed_) {
      spdlog::warn("output log {}: writing failed ({}); output from byte {} on is not retained", base_,
                   strerror(job.err), seg_start + w.data_durable);
    }
    failed_ = true;
    failed_at_ = std::max(index_.first(), seg_start + w.data_durable);
    index_.truncate(failed_at_);
    while (!segments_.empty() && segments_.back().start > failed_at_ && segments_.size() > 1) segments_.pop_back();
    if (!segments_.empty()) segments_.back().size = failed_at_ - segments_.back().start;
    for (auto& other : writers_) other->drop_waiting();
    waiting_ = 0;
    sync_budget();
  } else {
    w.data_durable += w.data_inflight.size();
    w.index_durable += w.index_inflight.size();
  }
  w.data_inflight.clear();
  w.index_inflight.clear();
  // Segments let go while this write was out.
  for (uint32_t k : unlink_when_written_) {
    for (auto it = writers_.begin(); it != writers_.end(); ++it)
      if ((*it)->k == k) {
        close_writer(**it);
        writers_.erase(it);
        break;
      }
    unlink_segment(k);
  }
  unlink_when_written_.clear();
  if (removed_) return remove();
  pump();
  run_waiting_reads();
  if (on_written_) on_written_();
}

void OutputLog::read(uint64_t offset, size_t max, ReadFn fn) {
  if (!removed_ && !failed_ && durable_end() < index_.end()) {
    waiting_reads_.push_back({index_.end(), offset, max, std::move(fn)});
    pump();  // bytes waiting for the delay go now
    return;
  }
  read_now(offset, max, std::move(fn));
}

void OutputLog::run_waiting_reads() {
  if (waiting_reads_.empty()) return;
  std::vector<WaitingRead> ready, still;
  for (auto& w : waiting_reads_)
    (removed_ || failed_ || durable_end() >= w.needed ? ready : still).push_back(std::move(w));
  waiting_reads_ = std::move(still);
  for (auto& w : ready) read_now(w.offset, w.max, std::move(w.fn));
}

void OutputLog::read_now(uint64_t offset, size_t max, ReadFn fn) {
  uint64_t durable = removed_ ? 0 : durable_end();
  if (offset < index_.first() || offset >= durable) return fn(0, {});
  std::vector<ReadJob::Piece> pieces;
  uint64_t at = offset, end = std::min<uint64_t>(durable, offset + max);
  for (const auto& s : segments_) {
    if (at >= end) break;
    if (at < s.start || at >= s.start + s.size) continue;
    uint64_t n = std::min(end, s.start + s.size) - at;
    pieces.push_back({data_path(s.k), at - s.start, static_cast<size_t>(n)});
    at += n;
  }
  if (pieces.empty()) return fn(0, {});
  ++ops_;
  ++reads_;
  fs::queue_job<ReadJob>(loop_, std::make_unique<ReadJob>(ReadJob{this, std::move(pieces), {}, std::move(fn)}),
                         ReadJob::run, ReadJob::done);
}

bool OutputLog::settled() const { return sealed_ && writers_.empty() && ops_ == 0 && waiting_reads_.empty(); }

bool OutputLog::holds_descriptor() const {
  for (const auto& w : writers_)
    if (w->data_fd >= 0 || w->index_fd >= 0) return true;
  return false;
}

size_t OutputLog::buffer_capacity() const {
  size_t n = 0;
  for (const auto& w : writers_)
    n += w->data.capacity() + w->index.capacity() + w->data_inflight.capacity() + w->index_inflight.capacity();
  return n;
}

void OutputLog::remove() {
  removed_ = true;
  cancel_delay();
  on_written_ = nullptr;
  guard_ = nullptr;
  for (auto& w : writers_) w->drop_waiting();
  waiting_ = 0;
  run_waiting_reads();
  if (ops_ > 0) return;  // finished by the last completion
  drop_spare();
  std::vector<std::string> paths;
  for (auto& w : writers_) close_writer(*w);
  writers_.clear();
  for (const auto& s : segments_) {
    paths.push_back(data_path(s.k));
    paths.push_back(index_path(s.k));
  }
  segments_.clear();
  spare_bytes_ = 0;
  sync_budget();
  if (!paths.empty()) unlink_on_pool(loop_, std::move(paths));
}

std::pair<uint32_t, uint32_t> OutputLog::segment_range() const {
  uint32_t first = 1, last = 0;
  auto add = [&](uint32_t k) {
    if (first > last) first = last = k;
    first = std::min(first, k);
    last = std::max(last, k);
  };
  for (const auto& seg : segments_) add(seg.k);
  if (spare_) add(*spare_);
  return {first, last};
}

std::vector<std::string> OutputLog::segment_names(const std::string& base, uint32_t first, uint32_t last) {
  std::string stem = base.substr(base.rfind('/') + 1);
  std::vector<std::string> names;
  for (uint64_t k = first; k <= last; ++k)
    for (const char* ext : {".output", ".index"}) names.push_back(segment_file(stem, ext, static_cast<uint32_t>(k)));
  return names;
}

void OutputLog::remove_segments(uv_loop_t* loop, const std::string& base, uint32_t first, uint32_t last) {
  std::string dir = base.substr(0, base.rfind('/') + 1);
  std::vector<std::string> paths = segment_names(base, first, last);
  if (paths.empty()) return;
  for (auto& p : paths) p.insert(0, dir);
  unlink_on_pool(loop, std::move(paths));
}

}  // namespace execd::exec
