// execd/api/output_log: a command's retained output (stdout and stderr in the
// order execd read them) in a file under the state directory, so it can be
// read by byte offset after the client that started the command is gone.
// All file I/O goes through libuv's threadpool; writes go through a
// FileAppender (one in flight, later bytes waiting), and what waits is part
// of the command's backpressure. Bytes past the limit are counted, not stored.
//
// Ownership: the command record owns its log. A filesystem request in flight
// points at the log, so the owner must not destroy it while busy(); remove()
// closes and unlinks with requests that need nothing of the log.
//
// Descriptors: a finished record is kept for --retention (up to 4096 of
// them), so once sealed (no more output) and caught up with the disk the log
// closes its file; a later read opens, reads and closes in one pool job.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "execd/api/file_appender.h"

namespace execd::api {

class OutputLog {
 public:
  static constexpr size_t kPendingBudget = 1 << 20;

  OutputLog(uv_loop_t* loop, std::string path, uint64_t limit) : loop_(loop), path_(std::move(path)), limit_(limit) {}
  OutputLog(const OutputLog&) = delete;
  OutputLog& operator=(const OutputLog&) = delete;
  // Filesystem requests are in flight: the log must stay.
  bool busy() const { return ops_ > 0; }

  // A log left by an earlier execd: its file holds `size` stored bytes of
  // the `produced` the command wrote. Sealed from the start.
  void adopt(uint64_t size, uint64_t produced);
  void append(const uint8_t* data, size_t len);
  // The command's output has ended: later appends are only counted, and the
  // file is closed once every write is done.
  void seal();
  bool holds_descriptor() const { return fd_ >= 0; }
  // Sealed, every write done and the file closed: nothing can use it any
  // more but a read (its owner may destroy it if it has no readers).
  bool settled() const { return sealed_ && fd_ < 0 && ops_ == 0 && writer_.idle() && waiting_reads_.empty(); }
  // Bytes of the next append() that will be stored (the rest is only counted).
  uint64_t room() const {
    return total_ < limit_ && !failed_ && !removed_ && !adopted_ && !sealed_ ? limit_ - total_ : 0;
  }
  uint64_t readable_bytes() const { return writer_.durable(); }
  uint64_t total_bytes() const { return total_; }
  bool truncated() const { return total_ > limit_; }
  size_t pending_bytes() const { return writer_.waiting(); }
  // Heap held by the write buffers (released once caught up with the disk).
  size_t buffer_capacity() const { return writer_.buffer_capacity(); }
  bool over_budget() const { return pending_bytes() > kPendingBudget; }
  // Called whenever a write completes (so a paused producer can resume).
  void set_on_written(std::function<void()> fn) { on_written_ = std::move(fn); }

  using ReadFn = std::function<void(int err, std::string data)>;
  // Reads up to `max` bytes starting at `offset`, once every byte offered
  // before the call is on disk: a reader sees all output execd had read.
  void read(uint64_t offset, size_t max, ReadFn fn);
  // Closes and unlinks the file (once outstanding I/O completes, if busy).
  void remove();

 private:
  void pump();
  void on_written(const FileAppender::Outcome& o);
  void close_if_idle();
  void read_durable(uint64_t offset, size_t max, ReadFn fn);
  void run_waiting_reads();

  struct WaitingRead {
    uint64_t needed;  // readable_bytes() must reach this first
    uint64_t offset;
    size_t max;
    ReadFn fn;
  };
  std::vector<WaitingRead> waiting_reads_;

  uv_loop_t* loop_;
  std::string path_;
  uint64_t limit_;
  int fd_ = -1;  // -1 before the first write (which creates the file) and once sealed
  bool failed_ = false, removed_ = false, adopted_ = false, sealed_ = false;
  // The first write also creates the file: one pool job, not an open and
  // then a write (a burst of commands queued hundreds of each).
  FileAppender writer_;
  uint64_t total_ = 0;   // bytes offered
  uint64_t stored_ = 0;  // bytes taken to be written (adopted: 0, all durable)
  int ops_ = 0;          // outstanding fs requests
  std::function<void()> on_written_;
};

}  // namespace execd::api
