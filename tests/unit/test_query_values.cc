// tests/unit/test_query_values.cc: query values decoded as the Go execd
// does (GET /command/{id}/logs?cursor=), and the listing cursor.
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <string_view>

#include "protocol/go_syntax.h"
#include "protocol/list_cursor.h"
#include "protocol/query_values.h"

using execd::protocol::logs_cursor_offset;
using execd::protocol::parse_go_int;
using execd::protocol::parse_line_range_params;

namespace {
bool parse_go_decimal_int64(std::string_view s, int64_t& out) { return parse_go_int(s, 10, out); }
}  // namespace

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

TEST_CASE("parse_line_range_params: Go's validation and messages") {
  using std::nullopt;
  std::string error;
  SUBCASE("absent or empty values: a plain download") {
    auto p = parse_line_range_params(nullopt, nullopt, nullopt, error);
    REQUIRE(p);
    CHECK_FALSE(p->requested);
    p = parse_line_range_params("", "", "bytes=0-1", error);
    REQUIRE(p);
    CHECK_FALSE(p->requested);
  }
  SUBCASE("defaults: offset 1, no limit") {
    auto p = parse_line_range_params("3", nullopt, nullopt, error);
    REQUIRE(p);
    CHECK(p->requested);
    CHECK(p->offset == 3);
    CHECK(p->limit == 0);
    p = parse_line_range_params(nullopt, "2", "", error);
    REQUIRE(p);
    CHECK(p->offset == 1);
    CHECK(p->limit == 2);
    p = parse_line_range_params("+7", "007", nullopt, error);  // ParseInt takes a sign and leading zeros
    REQUIRE(p);
    CHECK(p->offset == 7);
    CHECK(p->limit == 7);
    p = parse_line_range_params("9223372036854775807", nullopt, nullopt, error);
    REQUIRE(p);
    CHECK(p->offset == 9223372036854775807ull);
  }
  SUBCASE("with a Range header") {
    auto p = parse_line_range_params("1", nullopt, "bytes=0-10", error);
    REQUIRE_FALSE(p);
    CHECK(error == "line-based reading (offset/limit) and byte range (Range header) are mutually exclusive");
    // The conflict is reported before the values are looked at.
    error.clear();
    CHECK_FALSE(parse_line_range_params("abc", nullopt, "bytes=0-1", error));
    CHECK(error.find("mutually exclusive") != std::string::npos);
  }
  SUBCASE("bad values") {
    for (const char* bad : {"0", "-1", "abc", "1.5", " 1", "1 ", "0x10", "1_000", "+", "-",
                            "9223372036854775808", "99999999999999999999"}) {
      CAPTURE(bad);
      auto p = parse_line_range_params(bad, nullopt, nullopt, error);
      REQUIRE_FALSE(p);
      CHECK(error == std::string("invalid query parameter 'offset': ") + bad);
      auto q = parse_line_range_params("1", bad, nullopt, error);
      REQUIRE_FALSE(q);
      CHECK(error == std::string("invalid query parameter 'limit': ") + bad);
    }
  }
}

TEST_CASE("parse_go_int base 0: Go literals") {
  int64_t v = 0;
  CHECK((parse_go_int("0x1F", 0, v) && v == 31));
  CHECK((parse_go_int("0o17", 0, v) && v == 15));
  CHECK((parse_go_int("017", 0, v) && v == 15));
  CHECK((parse_go_int("0b11", 0, v) && v == 3));
  CHECK((parse_go_int("1_000", 0, v) && v == 1000));
  CHECK_FALSE(parse_go_int("1__0", 0, v));
  CHECK_FALSE(parse_go_int("_1", 0, v));
  CHECK_FALSE(parse_go_int("0x", 0, v));
  CHECK_FALSE(parse_go_int("1_000", 10, v));
  CHECK_FALSE(parse_go_int("0x1F", 10, v));
}

TEST_CASE("list cursor: opaque, round-trips, and is bound to its filter") {
  using namespace execd::protocol;
  ListPosition p{1733300000123456789, "cmd-1"};
  std::string c = encode_list_cursor("running=true", p);
  CHECK(c.find_first_not_of("0123456789abcdef") == std::string::npos);
  auto back = decode_list_cursor(c, "running=true");
  REQUIRE(back);
  CHECK(back->started_ns == p.started_ns);
  CHECK(back->id == "cmd-1");
  CHECK_FALSE(decode_list_cursor(c, "running=false"));
  CHECK_FALSE(decode_list_cursor("zz", "running=true"));
  CHECK_FALSE(decode_list_cursor(c.substr(1), "running=true"));
  CHECK_FALSE(decode_list_cursor("", "running=true"));
  CHECK(back->before(p.started_ns, "cmd-2"));
  CHECK_FALSE(back->before(p.started_ns, "cmd-1"));
  CHECK(back->before(p.started_ns + 1, "a"));
}
