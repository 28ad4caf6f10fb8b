// Bounded replay buffer of a PTY session's output, addressed by absolute offsets
// (the count of bytes ever appended), so a reconnecting client can ask for
// "everything since offset N" and learn when part of it was already dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace execd::pty {

class ReplayRing {
 public:
  static constexpr size_t kDefaultCapacity = size_t{1} << 20;

  // What read_from() found. The spans point into the ring and are valid only
  // until the next append(); copy() them if the data must outlive that.
  struct Slice {
    uint64_t requested_offset = 0;  // the offset asked for
    uint64_t start_offset = 0;      // absolute offset of the first returned byte
    std::span<const uint8_t> first;
    std::span<const uint8_t> second;  // non-empty only when the data wraps around
    // True when requested_offset is older than the oldest retained byte;
    // gap_bytes = start_offset - requested_offset bytes are lost for good.
    bool gap = false;
    uint64_t gap_bytes = 0;

    size_t size() const { return first.size() + second.size(); }
    bool empty() const { return size() == 0; }
    uint64_t end_offset() const { return start_offset + size(); }
    std::string copy() const;
  };

  // Memory is allocated on demand, growing geometrically up to `capacity` bytes,
  // so idle sessions do not each cost a full buffer. A capacity of 0 is treated as 1.
  explicit ReplayRing(size_t capacity = kDefaultCapacity);

  void append(const uint8_t* data, size_t len);
  void append(std::string_view bytes) {
    append(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }

  // Retained bytes from `offset` to the end (at most `max_bytes` of them). An offset
  // at or past the end gives an empty slice starting at end_offset(); an offset older
  // than oldest_offset() is clamped to it and reported as a gap.
  Slice read_from(uint64_t offset, size_t max_bytes = SIZE_MAX) const;

  uint64_t end_offset() const { return total_; }  // total bytes ever appended
  uint64_t oldest_offset() const { return total_ - retained(); }
  size_t retained() const { return total_ < capacity_ ? static_cast<size_t>(total_) : capacity_; }
  size_t capacity() const { return capacity_; }
  size_t allocated() const { return storage_.size(); }

 private:
  void grow_for(uint64_t new_total);

  size_t capacity_;
  uint64_t total_ = 0;
  // The byte at absolute offset o lives at storage_[o % capacity_]. Before the
  // first wrap-around storage_ may be smaller than capacity_, but then every
  // retained offset is below storage_.size(), so the same rule holds.
  std::vector<uint8_t> storage_;
};

}  // namespace execd::pty
