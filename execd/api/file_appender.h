// execd/api/file_appender: bytes appended in order to one file through
// libuv's threadpool, one write in flight at a time (the pool has many
// threads, and two writes out at once could land in either order, while a
// reader of durable() must find a prefix of the bytes). What arrives while a
// write is out waits in `pending_`; the next write takes all of it, and the
// pool thread loops over short writes. Used by the retained output log and by
// the spill file of an execution stream.
//
// Ownership: the appender is a member of its owner, and a write in flight
// points at it and at its buffer. The owner must outlive the write's `done`
// callback: the output log counts its requests, the spill file's callback
// holds a reference to it.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <string>

namespace execd::api {

class FileAppender {
 public:
  struct Outcome {
    size_t written;  // bytes of this write now in the file
    int err;         // errno of the failure, 0 when all were written
    int fd;          // the file: created by this write when it was given -1
  };
  using Done = std::function<void(const Outcome&)>;

  void append(const char* data, size_t len) { pending_.append(data, len); }
  // Bytes not on disk yet: waiting, and in the write that is out.
  size_t waiting() const { return pending_.size() + inflight_.size(); }
  bool idle() const { return !writing_ && pending_.empty(); }
  uint64_t durable() const { return durable_; }
  // A file written before this appender knew it (an adopted log).
  void set_durable(uint64_t bytes) { durable_ = bytes; }
  void drop_pending() { pending_.clear(); }
  size_t buffer_capacity() const { return pending_.capacity() + inflight_.capacity(); }
  // Gives back the buffers' memory once nothing waits (a retained log keeps
  // its appender for --retention).
  void release_buffers();

  // Writes everything pending at durable() into `fd`, or into a file created
  // (and truncated) at `path` when fd < 0; `path` must stay valid until
  // `done`. On failure what was pending is dropped. False when a write is out
  // already or nothing waits: nothing started, `done` will not run.
  bool write_next(uv_loop_t* loop, int fd, const char* path, Done done);

 private:
  struct Job;
  std::string pending_, inflight_;
  uint64_t durable_ = 0;
  bool writing_ = false;
};

}  // namespace execd::api
