// tests/unit/test_log_cursor.cc — GET /command/{id}/logs?cursor= decoded as
// the Go execd does (pty/log_cursor.h).
#include <doctest/doctest.h>

#include <optional>
#include <string_view>

#include "pty/log_cursor.h"

using execd::pty::logs_cursor_offset;
using execd::pty::parse_go_decimal_int64;

TEST_CASE("logs cursor: Go's QueryInt64 with default 0") {
  CHECK(logs_cursor_offset(std::nullopt) == 0u);
  CHECK(logs_cursor_offset("") == 0u);
  CHECK(logs_cursor_offset("0") == 0u);
  CHECK(logs_cursor_offset("42") == 42u);
  CHECK(logs_cursor_offset("+42") == 42u);
  CHECK(logs_cursor_offset("007") == 7u);
  CHECK(logs_cursor_offset("-0") == 0u);
  CHECK(logs_cursor_offset("9223372036854775807") == 9223372036854775807ull);
  // Non-numeric and overflowing values read as 0: the whole log.
  for (const char* zero : {"abc", "1.5", " 5", "5 ", "0x10", "1_0", "+", "-", "1e3", "9223372036854775808",
                           "18446744073709551616", "99999999999999999999999", "-9223372036854775809"}) {
    CAPTURE(zero);
    CHECK(logs_cursor_offset(zero) == 0u);
  }
  // Negative values parse, and Seek rejects them: 400.
  CHECK_FALSE(logs_cursor_offset("-1").has_value());
  CHECK_FALSE(logs_cursor_offset("-9223372036854775808").has_value());
}

TEST_CASE("parse_go_decimal_int64 bounds") {
  int64_t v = 5;
  CHECK(parse_go_decimal_int64("-9223372036854775808", v));
  CHECK(v == INT64_MIN);
  CHECK(parse_go_decimal_int64("9223372036854775807", v));
  CHECK(v == INT64_MAX);
  v = 5;
  CHECK_FALSE(parse_go_decimal_int64("9223372036854775808", v));
  CHECK_FALSE(parse_go_decimal_int64("", v));
  CHECK(v == 5);
}
