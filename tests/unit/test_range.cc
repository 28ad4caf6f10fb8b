// tests/unit/test_range.cc — Range header parsing.
#include <doctest/doctest.h>

#include "protocol/range.h"

using execd::protocol::parse_range_header;
using execd::protocol::RangeOutcome;

namespace {
void check_range(const char* header, uint64_t size, uint64_t first, uint64_t last) {
  auto r = parse_range_header(header, size);
  INFO(header);
  REQUIRE(r.outcome == RangeOutcome::satisfiable);
  CHECK(r.first == first);
  CHECK(r.last == last);
  CHECK(r.length() == last - first + 1);
}
RangeOutcome outcome(const char* header, uint64_t size) { return parse_range_header(header, size).outcome; }
}  // namespace

TEST_CASE("range: absent or empty header") {
  CHECK(parse_range_header(std::nullopt, 10).outcome == RangeOutcome::none);
  CHECK(outcome("", 10) == RangeOutcome::none);
  CHECK(outcome("   ", 10) == RangeOutcome::none);
}

TEST_CASE("range: satisfiable forms") {
  check_range("bytes=0-9", 20, 0, 9);        // Go test: start 0 len 10
  check_range("bytes=-5", 10, 5, 9);         // Go test: start 5 len 5
  check_range("bytes=5-", 10, 5, 9);
  check_range("bytes=0-100", 10, 0, 9);      // end clamped
  check_range("bytes=-100", 10, 0, 9);       // suffix clamped
  check_range("bytes=3-3", 10, 3, 3);
  check_range(" bytes=2-4 ", 10, 2, 4);
  check_range("bytes= 2 - 4 ", 10, 2, 4);
  check_range("bytes=0-99999999999999999999999", 10, 0, 9);  // saturates, clamps
}

TEST_CASE("range: only the first satisfiable spec is served") {
  check_range("bytes=0-1,4-5", 10, 0, 1);
  check_range("bytes=50-60, 4-5", 10, 4, 5);  // unsatisfiable specs are skipped
  check_range("bytes=,,2-3,", 10, 2, 3);      // empty specs ignored
}

TEST_CASE("range: unsatisfiable") {
  CHECK(outcome("bytes=10-", 10) == RangeOutcome::unsatisfiable);
  CHECK(outcome("bytes=10-20", 10) == RangeOutcome::unsatisfiable);
  CHECK(outcome("bytes=-0", 10) == RangeOutcome::unsatisfiable);
  CHECK(outcome("bytes=0-", 0) == RangeOutcome::unsatisfiable);
  CHECK(outcome("bytes=-5", 0) == RangeOutcome::unsatisfiable);
  CHECK(outcome("bytes=99999999999999999999999-", 10) == RangeOutcome::unsatisfiable);
}

TEST_CASE("range: malformed") {
  CHECK(outcome("bytes=foo", 10) == RangeOutcome::malformed);  // Go test
  CHECK(outcome("items=0-1", 10) == RangeOutcome::malformed);
  CHECK(outcome("bytes=5-2", 10) == RangeOutcome::malformed);
  CHECK(outcome("bytes=5", 10) == RangeOutcome::malformed);
  CHECK(outcome("bytes=-", 10) == RangeOutcome::malformed);
  CHECK(outcome("bytes=a-b", 10) == RangeOutcome::malformed);
  CHECK(outcome("bytes=+1-2", 10) == RangeOutcome::malformed);
  CHECK(outcome("bytes=1-2,x", 10) == RangeOutcome::malformed);  // any bad spec poisons the header
  CHECK(outcome("bytes=", 10) == RangeOutcome::malformed);
  CHECK(outcome("bytes=,", 10) == RangeOutcome::malformed);
}
