// Unit tests for pty/replay_ring: absolute offsets, lazy growth, wraparound, gaps.
#include <doctest/doctest.h>

#include <string>

#include "pty/replay_ring.h"

using execd::pty::ReplayRing;

namespace {

std::string pattern(uint64_t from, size_t len) {
  // Byte value is a function of its absolute offset, so any slice can be checked.
  std::string out(len, '\0');
  for (size_t i = 0; i < len; ++i) out[i] = static_cast<char>(((from + i) * 7 + 3) & 0xFF);
  return out;
}

}  // namespace

TEST_CASE("replay ring: empty ring") {
  ReplayRing ring;
  CHECK(ring.capacity() == ReplayRing::kDefaultCapacity);
  CHECK(ring.allocated() == 0);
  const auto slice = ring.read_from(0);
  CHECK(slice.empty());
  CHECK_FALSE(slice.gap);
  CHECK(slice.start_offset == 0);
  CHECK(ring.read_from(10).start_offset == 0);
}

TEST_CASE("replay ring: allocates lazily and grows up to capacity") {
  ReplayRing ring(1 << 20);
  ring.append("hello");
  CHECK(ring.allocated() >= 5);
  CHECK(ring.allocated() < (1 << 20));
  const size_t small = ring.allocated();
  ring.append(pattern(5, 100000));
  CHECK(ring.allocated() > small);
  CHECK(ring.allocated() <= (1 << 20));
  ring.append(pattern(100005, 2 << 20));
  CHECK(ring.allocated() == (1 << 20));
  CHECK(ring.end_offset() == 5 + 100000 + (2u << 20));
  const auto slice = ring.read_from(ring.oldest_offset());
  CHECK(slice.size() == (1u << 20));
  CHECK(slice.copy() == pattern(ring.oldest_offset(), 1 << 20));
}

TEST_CASE("replay ring: reads from any offset before the wrap") {
  ReplayRing ring(64);
  ring.append(pattern(0, 40));
  for (uint64_t offset = 0; offset <= 45; ++offset) {
    const auto slice = ring.read_from(offset);
    CHECK_FALSE(slice.gap);
    if (offset >= 40) {
      CHECK(slice.empty());
      CHECK(slice.start_offset == 40);
    } else {
      CHECK(slice.start_offset == offset);
      CHECK(slice.second.empty());
      CHECK(slice.copy() == pattern(offset, 40 - offset));
    }
  }
}

TEST_CASE("replay ring: wraparound returns two spans in order") {
  ReplayRing ring(16);
  ring.append(pattern(0, 10));
  ring.append(pattern(10, 10));  // wraps: retained [4, 20)
  CHECK(ring.end_offset() == 20);
  CHECK(ring.oldest_offset() == 4);
  CHECK(ring.retained() == 16);
  const auto slice = ring.read_from(4);
  CHECK_FALSE(slice.gap);
  CHECK(slice.first.size() == 12);   // offsets 4..15 at indexes 4..15
  CHECK(slice.second.size() == 4);   // offsets 16..19 at indexes 0..3
  CHECK(slice.copy() == pattern(4, 16));
  const auto tail = ring.read_from(17);
  CHECK(tail.first.size() == 3);
  CHECK(tail.second.empty());
  CHECK(tail.copy() == pattern(17, 3));

  // Many small appends at every alignment still read back exactly.
  ReplayRing small(13);
  uint64_t total = 0;
  for (size_t step = 1; step < 40; ++step) {
    small.append(pattern(total, step % 7));
    total += step % 7;
    for (uint64_t offset = small.oldest_offset(); offset <= total; ++offset) {
      const auto part = small.read_from(offset);
      REQUIRE_FALSE(part.gap);
      REQUIRE(part.copy() == pattern(offset, static_cast<size_t>(total - offset)));
    }
  }
}

TEST_CASE("replay ring: offsets older than the buffer are a gap") {
  ReplayRing ring(16);
  ring.append(pattern(0, 50));  // one append larger than capacity keeps the last 16
  CHECK(ring.end_offset() == 50);
  CHECK(ring.oldest_offset() == 34);
  const auto slice = ring.read_from(10);
  CHECK(slice.gap);
  CHECK(slice.gap_bytes == 24);
  CHECK(slice.requested_offset == 10);
  CHECK(slice.start_offset == 34);
  CHECK(slice.copy() == pattern(34, 16));
  const auto exact = ring.read_from(34);
  CHECK_FALSE(exact.gap);
  CHECK(exact.size() == 16);
  const auto future = ring.read_from(1000);
  CHECK_FALSE(future.gap);
  CHECK(future.empty());
  CHECK(future.start_offset == 50);
}

TEST_CASE("replay ring: max_bytes limits a read for chunked sending") {
  ReplayRing ring(16);
  ring.append(pattern(0, 28));  // retained [12, 28), wrapped
  auto chunk = ring.read_from(0, 5);
  CHECK(chunk.gap);
  CHECK(chunk.start_offset == 12);
  CHECK(chunk.copy() == pattern(12, 5));
  std::string all;
  uint64_t next = ring.oldest_offset();
  while (true) {
    const auto part = ring.read_from(next, 5);
    if (part.empty()) break;
    all += part.copy();
    next = part.end_offset();
  }
  CHECK(all == pattern(12, 16));
}

TEST_CASE("replay ring: zero capacity keeps one byte") {
  ReplayRing ring(0);
  ring.append("abc");
  CHECK(ring.capacity() == 1);
  CHECK(ring.read_from(0).copy() == "c");
  CHECK(ring.read_from(0).gap_bytes == 2);
}
