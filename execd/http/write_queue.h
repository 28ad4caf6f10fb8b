// execd/http/write_queue: what a connection still owes its peer, in order:
// byte buffers and file ranges. Pure bookkeeping with no socket, so it is
// unit-tested on its own: the connection gathers an iovec batch from the
// head, writes it however it can, and reports how much went out.
//
// Buffers are moved in (no copy) or small pieces are appended to the tail
// buffer. Spent buffers are kept for reuse (take_buffer), so a steady stream
// allocates nothing per write. File ranges share ownership of their file.
// The water marks count buffered bytes and file bytes alike.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace execd::http {

// An open file shared by whoever still needs it: closed with the last owner.
// File ranges in the queue hold one, so a response may end (and its producer
// go) while its last bytes still wait to be sent.
struct OpenFile {
  explicit OpenFile(int descriptor) : fd(descriptor) {}
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;
  ~OpenFile();
  int fd;
};
using SharedFile = std::shared_ptr<const OpenFile>;

class WriteQueue {
 public:
  static constexpr size_t kLowWater = 256 * 1024;
  static constexpr size_t kHighWater = 1024 * 1024;
  static constexpr size_t kMaxIov = 64;

  void append(std::string&& data);
  void append(std::string_view data);
  void append_file(SharedFile file, uint64_t offset, uint64_t length);

  size_t bytes() const { return bytes_; }
  bool empty() const { return head_ == segments_.size(); }
  bool above_high_water() const { return bytes_ >= kHighWater; }
  bool below_low_water() const { return bytes_ < kLowWater; }

  // The head is a file range: its descriptor, position and remaining length.
  bool head_is_file() const { return !empty() && segments_[head_].file; }
  int head_fd() const { return segments_[head_].file->fd; }
  uint64_t head_file_offset() const { return segments_[head_].offset; }
  uint64_t head_file_remaining() const { return segments_[head_].length; }

  // Fills `iov` with up to `max` buffers from the head, stopping before the
  // first file range. Returns the count.
  int gather(struct iovec* iov, int max) const;
  // `n` bytes from the head went out (buffers or the head file range).
  void consume(size_t n);
  // Drops everything (the peer is gone).
  void clear();

  // An empty string with capacity from a spent buffer, if one is left.
  std::string take_buffer();
  // Frees the spent buffers kept for reuse (the stream that used them ended).
  void drop_spares() {
    spare_ = {};
    if (empty()) segments_ = {};
  }

 private:
  struct Segment {
    std::string data;
    size_t start = 0;  // bytes of `data` already written
    SharedFile file;   // a file range instead of data
    uint64_t offset = 0, length = 0;
  };
  static constexpr size_t kCoalesceBelow = 4096;
  static constexpr size_t kSpareBuffers = 4;
  void recycle(std::string&& s);

  void pop_front();
  // Segments from head_ on are queued; a vector (not a deque, which
  // allocates a block up front) keeps an idle connection's queue empty.
  std::vector<Segment> segments_;
  size_t head_ = 0;
  std::vector<std::string> spare_;
  size_t bytes_ = 0;
};

}  // namespace execd::http
