// Bounded replay ring with absolute offsets (see replay_ring.h).
#include "pty/replay_ring.h"

#include <algorithm>
#include <cstring>

namespace execd::pty {
namespace {
constexpr size_t kMinimumAllocation = 4096;
}  // namespace

std::string ReplayRing::Slice::copy() const {
  std::string out;
  out.reserve(size());
  out.append(reinterpret_cast<const char*>(first.data()), first.size());
  out.append(reinterpret_cast<const char*>(second.data()), second.size());
  return out;
}

ReplayRing::ReplayRing(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

void ReplayRing::grow_for(uint64_t new_total) {
  if (storage_.size() == capacity_) return;
  const uint64_t needed = std::min<uint64_t>(new_total, capacity_);
  if (needed <= storage_.size()) return;
  // Doubling keeps the number of reallocations (and copies) logarithmic.
  const size_t doubled = std::max(storage_.size() * 2, kMinimumAllocation);
  const size_t target = std::min(capacity_, std::max(static_cast<size_t>(needed), doubled));
  // Before the first wrap the data sits at [0, total_), which resize() preserves.
  storage_.resize(target);
}

void ReplayRing::append(const uint8_t* data, size_t len) {
  if (len == 0) return;
  if (len > capacity_) {
    // Only the last capacity_ bytes can survive; skip the rest without copying.
    const size_t skipped = len - capacity_;
    total_ += skipped;
    data += skipped;
    len = capacity_;
  }
  grow_for(total_ + len);
  const size_t position = static_cast<size_t>(total_ % capacity_);
  const size_t first_part = std::min(len, capacity_ - position);
  std::memcpy(storage_.data() + position, data, first_part);
  if (first_part < len) std::memcpy(storage_.data(), data + first_part, len - first_part);
  total_ += len;
}

ReplayRing::Slice ReplayRing::read_from(uint64_t offset, size_t max_bytes) const {
  Slice slice;
  slice.requested_offset = offset;
  const uint64_t oldest = oldest_offset();
  uint64_t start = offset;
  if (start < oldest) {
    slice.gap = true;
    slice.gap_bytes = oldest - start;
    start = oldest;
  }
  if (start >= total_) {
    slice.start_offset = total_;
    return slice;
  }
  slice.start_offset = start;
  const size_t length = static_cast<size_t>(std::min<uint64_t>(total_ - start, max_bytes));
  const size_t position = static_cast<size_t>(start % capacity_);
  const size_t first_part = std::min(length, capacity_ - position);
  slice.first = std::span<const uint8_t>(storage_.data() + position, first_part);
  if (first_part < length) slice.second = std::span<const uint8_t>(storage_.data(), length - first_part);
  return slice;
}

}  // namespace execd::pty
