// execd/api/spill_file: where an execution stream puts output its client has
// not taken yet when the producer cannot be paused (a kernel's iopub is a PUB
// socket: not reading it would make ZeroMQ drop messages at its high-water
// mark). Bytes are appended in order and written to an anonymous file in the
// state directory by a FileAppender (the threadpool, one write at a time); the stream
// hands the written ranges to the connection as file ranges (sendfile), so
// spilled output never comes back into memory.
//
// Memory: only bytes not yet written (waiting, and the write in flight).
// Disk: at most `limit` bytes; append() refuses what would go past it, and
// the stream turns that into a structured end (see ExecutionStream).
//
// Ownership: shared. The stream holds one reference and every write in flight
// holds another, so the stream may go at any time (detach() first); the file
// itself is shared with the connection's queued ranges and closes with the
// last of them. The file is unlinked when created: nothing outlives execd.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "execd/api/file_appender.h"
#include "execd/http/write_queue.h"

namespace execd::api {

class SpillFile : public std::enable_shared_from_this<SpillFile> {
 public:
  // Bytes that may wait in memory for the disk; past this the disk cannot
  // keep up with the producer and the spill fails rather than grow.
  static constexpr size_t kMemoryBudget = 8 << 20;

  // Creates the file (one open(2) on the loop: once per stream that falls
  // behind). Null with `error` set when it cannot.
  static std::shared_ptr<SpillFile> create(uv_loop_t* loop, const std::string& dir, uint64_t limit,
                                           std::string& error);

  // False (nothing stored) when `len` more bytes would pass the limit or the
  // file has failed; `error` says which.
  bool append(const char* data, size_t len, std::string& error);
  // Bytes on disk, readable by the connection from offset 0.
  uint64_t durable() const { return writer_.durable(); }
  // Nothing waits for the disk.
  bool settled() const { return writer_.idle(); }
  bool failed() const { return failed_; }
  const std::string& failure() const { return failure_; }
  const http::SharedFile& file() const { return file_; }

  // Called after each write completes (or fails).
  void set_on_written(std::function<void()> fn) { on_written_ = std::move(fn); }
  // The owner is gone: no more callbacks, nothing more written.
  void detach();

 private:
  SpillFile(uv_loop_t* loop, http::SharedFile file, uint64_t limit)
      : loop_(loop), file_(std::move(file)), limit_(limit) {}
  void pump();
  void on_written(const FileAppender::Outcome& o);

  uv_loop_t* loop_;
  http::SharedFile file_;
  uint64_t limit_;
  uint64_t accepted_ = 0;  // bytes append() took
  FileAppender writer_;
  bool failed_ = false, detached_ = false;
  std::string failure_;
  std::function<void()> on_written_;
};

}  // namespace execd::api
