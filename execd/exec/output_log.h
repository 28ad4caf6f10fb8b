// execd/exec/output_log: an execution's retained output (stdout, stderr and
// structured events in the order execd took them) on disk under the state
// directory, readable by combined offset while the execution runs and for
// --retention after it ended, across restarts too.
//
// Newest bytes win: the log is a run of segment files (`<id>.output`, then
// `<id>.output.<k>`), each a quarter of the limit, each with its index file
// (`<id>.index[.<k>]`, protocol/resume's format). When the retained bytes
// would pass the limit the oldest segment goes, unless the owner's drop guard
// says a reader still needs it (the owner then pauses its producer, see
// exec/execution). What a reader asked for and the log let go is a gap.
// A dropped segment's data file (its index unlinked at once, so a restart
// never adopts it) is renamed to the next segment and overwritten: a long
// stream then rewrites cached pages instead of allocating, and freeing,
// a new file's.
//
// Writing: one pool job at a time writes the data and its index entries
// (appends arriving meanwhile wait in memory, and what waits is part of the
// producer's backpressure), so durable bytes are always a prefix. A write
// that fails (a full disk) is not durable: the log stops storing, keeps what
// was durable before it, and says from where it failed; the index in memory
// is cut back to match.
//
// Batching: a running log whose waiting bytes are fewer than kWriteBatch
// writes them within a WriteDelay's period instead of at once (a stream
// read in 8-32 KiB pieces otherwise made a pool job per piece, and each job
// costs two cross-thread wake-ups); a read, the seal and the delay's close
// write at once. What a SIGKILL can lose is the newest bytes of that
// period, as it could lose those of the write in flight before.
//
// Budget: a log given the state directory's budget (exec/state_budget)
// reports its bytes on disk (segments, plus a file overhead each, and a kept
// data file) as they change, and asks the budget before taking new bytes,
// which may make it (or another log) shed its oldest segments first; its
// segments are then small enough (StateBudget::segment_bytes) to shed in
// steps. Destroyed without remove() (the log went cold), its bytes stay
// counted: the registry carries them with the cold record.
//
// Ownership: the execution owns its log. Pool jobs in flight point at it, so
// the owner must not destroy it while busy(); remove() unlinks every file
// with requests that need nothing of the log. A sealed, settled log holds no
// descriptor and no buffer: reads open, read and close in one pool job.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "protocol/resume.h"

namespace execd::exec {

class OutputLog;
class StateBudget;

// One timer for every log's delayed writes (the registry owns it; it must
// outlive its logs).
class WriteDelay {
 public:
  WriteDelay(uv_loop_t* loop, uint64_t period_ms);
  WriteDelay(const WriteDelay&) = delete;
  WriteDelay& operator=(const WriteDelay&) = delete;
  // False once closed: the log writes at once.
  bool add(OutputLog& log);
  void remove(OutputLog& log);
  // Writes every delayed log now, and from now on delays nothing (daemon
  // exit: the loop runs dry after this, and the timer is closed).
  void close();

 private:
  void fire();

  uv_timer_t timer_;
  uint64_t period_ms_;
  std::vector<OutputLog*> logs_;
  bool closed_ = false;
};

class OutputLog {
 public:
  // Bytes waiting for the disk past which the producer is paused.
  static constexpr size_t kPendingBudget = 1 << 20;
  // The last two writes at least this large together mean output is
  // streaming: the writer keeps its buffers (at most ~3 MiB) when it catches
  // up, until smaller writes or the seal. Two, because a fast disk takes a
  // stream in writes of a few pipe reads each (32 KiB typical).
  static constexpr size_t kStreamingWrite = 64 << 10;
  // Fewer waiting bytes than this wait for the delay (when there is one).
  static constexpr size_t kWriteBatch = 128 << 10;

  // `base`: "<state dir>/<id>"; `limit`: bytes retained at most; `delay`:
  // where small writes wait (none: every write goes at once).
  OutputLog(uv_loop_t* loop, std::string base, uint64_t limit, WriteDelay* delay = nullptr);
  ~OutputLog();
  OutputLog(const OutputLog&) = delete;
  OutputLog& operator=(const OutputLog&) = delete;

  // The segments an earlier execd left for `base` (file names in the state
  // directory, as listed by the caller): read back, sealed. False if there
  // is nothing usable (the log is then empty).
  bool adopt(const std::vector<std::string>& names_in_dir);

  // Appends `len` bytes of `channel` (0 stdout, 1 stderr, 2 events).
  // Bytes read into room() are taken where they are, without a copy.
  void append(uint8_t channel, const uint8_t* data, size_t len);
  // Where the next output bytes may be read into (valid until the next call
  // on the log): room in the open segment's waiting buffer, or empty (the
  // caller reads elsewhere and append() copies).
  static constexpr size_t kRoomBytes = 256 << 10, kMinRoom = 16 << 10;
  std::span<uint8_t> room();
  // No more appends: the files close once written.
  void seal();
  const protocol::OutputIndex& index() const { return index_; }
  uint64_t first() const { return index_.first(); }
  uint64_t end() const { return index_.end(); }
  // Storing stopped (a failed write): nothing from failed_at() on is kept.
  bool failed() const { return failed_; }
  uint64_t failed_at() const { return failed_at_; }
  // Asked before the oldest segment is dropped: may [first(), upto) go?
  using DropGuard = std::function<bool(uint64_t upto)>;
  void set_drop_guard(DropGuard guard) { guard_ = std::move(guard); }
  // Retained bytes past the limit because the guard said no.
  bool over_limit() const { return retained() > limit_; }
  // Drops what the limit and the guard allow now.
  void trim();
  bool over_budget() const { return waiting_ > kPendingBudget; }
  uint64_t limit() const { return limit_; }
  // Called whenever a write completes (a paused producer may resume).
  void set_on_written(std::function<void()> fn) { on_written_ = std::move(fn); }

  // Reads up to `max` bytes from `offset`, once every byte appended before
  // the call is on disk: a reader sees all output execd had taken. Fewer (or
  // none) when the durable end comes first or the log let go of them
  // meanwhile.
  using ReadFn = std::function<void(int err, std::string data)>;
  void read(uint64_t offset, size_t max, ReadFn fn);

  // File requests are in flight: the log must stay.
  bool busy() const { return ops_ > 0; }
  // Sealed, written, files closed: only reads can use it now.
  bool settled() const;
  bool holds_descriptor() const;
  size_t buffer_capacity() const;
  // Closes and unlinks every file (once outstanding I/O completes).
  void remove();

  // From now on this log's bytes on disk count against `budget` (what it
  // holds already is counted at once). Running logs get budget-sized segments.
  void set_budget(StateBudget* budget);
  // Bytes on disk as the budget counts them.
  uint64_t disk_bytes() const;
  // The budget wants room: a sealed, written log lets go of every segment
  // (its offsets stay: readers get a gap); bytes freed.
  uint64_t evict();
  // The budget wants room from a running log: its oldest segment goes
  // unless it is the open one; bytes freed.
  uint64_t shed_oldest();
  // Where the oldest segment ends (what shed_oldest would let go of).
  std::optional<uint64_t> oldest_segment_end() const;

  // For a settled log let go of (exec/cold_records) and found again later:
  // the segment numbers its files use, first to last (a kept spare data
  // file included); first > last when there are none.
  std::pair<uint32_t, uint32_t> segment_range() const;
  // The file names adopt() needs for segments first..last of `base`.
  static std::vector<std::string> segment_names(const std::string& base, uint32_t first, uint32_t last);
  // What remove() does for such a log, without it.
  static void remove_segments(uv_loop_t* loop, const std::string& base, uint32_t first, uint32_t last);

 private:
  // Bytes whose spare capacity can be filled in place and then taken in
  // (commit): a std::string cannot grow without writing what it grows by.
  class Bytes {
   public:
    char* data() { return bytes_.get(); }
    const char* data() const { return bytes_.get(); }
    size_t size() const { return size_; }
    size_t capacity() const { return cap_; }
    bool empty() const { return size_ == 0; }
    char* end() { return bytes_.get() + size_; }
    size_t room() const { return cap_ - size_; }
    void reserve(size_t n);
    void append(const uint8_t* p, size_t n);
    void commit(size_t n) { size_ += n; }
    void clear() { size_ = 0; }
    void swap(Bytes& o) noexcept;
    void release();

   private:
    std::unique_ptr<char[]> bytes_;
    size_t size_ = 0, cap_ = 0;
  };
  struct Segment {
    uint32_t k;
    uint64_t start;  // combined offset
    uint64_t size;   // bytes stored in it
  };
  // The segment being written (the last one) while it has work: its files,
  // what waits for them, and what the write in flight carries.
  struct Writer {
    uint32_t k;
    int data_fd = -1, index_fd = -1;
    bool created = false;
    bool reused = false;  // a dropped segment's file: its old tail is cut at the close
    Bytes data;           // waiting
    std::string index;
    size_t open_entry = std::string::npos;  // the last entry in `index`, still growing
    Bytes data_inflight;                    // in the write out
    std::string index_inflight;
    uint64_t data_durable = 0, index_durable = 0;
    size_t last_writes[2] = {0, 0};  // bytes of the last two completed writes
    bool streaming() const { return last_writes[0] + last_writes[1] >= kStreamingWrite; }
    void drop_waiting() {
      data.clear();
      index.clear();
      open_entry = std::string::npos;
    }
  };
  struct WriteJob;
  struct ReadJob;

  static void grow_for(Bytes& buf, size_t more);
  // Segment k's file: "<prefix><ext>" for 0, "<prefix><ext>.<k>" after.
  static std::string segment_file(const std::string& prefix, const char* ext, uint32_t k);
  std::string data_path(uint32_t k) const;
  std::string index_path(uint32_t k) const;
  uint64_t retained() const { return index_.end() - index_.first(); }
  Writer& writer_for_new_bytes();
  void roll_over();
  void pump();
  bool delay_write();
  void cancel_delay();
  void on_write_done(WriteJob& job);
  void drop_oldest();
  void close_writer(Writer& w);
  void read_now(uint64_t offset, size_t max, ReadFn fn);
  void run_waiting_reads();
  uint64_t durable_end() const { return index_.end() - waiting_ - inflight_; }
  void unlink_segment(uint32_t k);
  void drop_spare();
  void sync_budget();
  // Files of a segment take blocks of their own, whatever their bytes.
  static constexpr uint64_t kSegmentOverhead = 8 << 10;

  uv_loop_t* loop_;
  std::string base_;
  uint64_t limit_, segment_bytes_;
  protocol::OutputIndex index_;
  // Vectors, not deques: a handful of entries each, and a deque allocates
  // ~600 bytes even when empty, per finished execution kept.
  std::vector<Segment> segments_;
  std::vector<std::unique_ptr<Writer>> writers_;  // oldest first; the last one takes appends
  uint32_t next_k_ = 0;
  uint64_t waiting_ = 0, inflight_ = 0;  // data bytes not on disk yet
  bool writing_ = false, sealed_ = false, failed_ = false, removed_ = false;
  uint64_t failed_at_ = 0;
  int ops_ = 0, reads_ = 0;  // pool jobs out; of them, reads
  // A dropped segment (its data file; its index is gone), kept for the next
  // segment to overwrite.
  std::optional<uint32_t> spare_;
  uint64_t spare_bytes_ = 0;
  StateBudget* budget_ = nullptr;
  uint64_t charged_ = 0;  // what budget_ counts for this log
  DropGuard guard_;
  WriteDelay* delay_;
  bool delayed_ = false;    // waiting in delay_
  bool write_due_ = false;  // the delay ran out: the next pump writes whatever waits
  friend class WriteDelay;
  std::function<void()> on_written_;
  struct WaitingRead {
    uint64_t needed;
    uint64_t offset;
    size_t max;
    ReadFn fn;
  };
  std::vector<WaitingRead> waiting_reads_;
  std::vector<uint32_t> unlink_when_written_;  // dropped while their write was out
};

}  // namespace execd::exec
