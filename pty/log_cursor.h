// pty/log_cursor.h — the `cursor` query value of GET /command/{id}/logs,
// decoded exactly as the Go execd v1.0.19 does. Header-only, pure.
//
// Upstream (components/execd/pkg/web/controller/command.go,
// GetBackgroundCommandOutput; basic.go, QueryInt64; pkg/runtime/
// command_status.go, SeekBackgroundCommandOutput):
//   cursor := QueryInt64(c.Query("cursor"), 0)
//     = strconv.ParseInt(raw, 10, 64), and 0 on ANY parse error: absent,
//       empty, non-numeric ("abc", "1.5", " 5", "0x10", "1_0"), and values
//       that overflow int64 ("9223372036854775808", "-9223372036854775809").
//       A leading '+' or '-' and leading zeros are fine ("+5" = 5, "007" = 7).
//   file.Seek(cursor, io.SeekStart) on the combined output file
//     ($TMPDIR/<id>.output): a negative cursor fails with EINVAL ->
//     400 INVALID_REQUEST_BODY "error seek file: seek <file>: invalid argument".
//   io.ReadAll from there, then the position: the body is every byte from
//     cursor to the current end of the file (no size cap), and
//     EXECD-COMMANDS-TAIL-CURSOR = cursor + body length. A cursor past the end
//     gives an empty body and echoes the cursor itself (Seek past EOF is
//     allowed; it is not clamped to the size).
// So an overflowing cursor means "from the start", never "from the end".
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

namespace execd::pty {

// Go's strconv.ParseInt(raw, 10, 64). False on any error (then `out` is untouched).
inline bool parse_go_decimal_int64(std::string_view raw, int64_t& out) {
  size_t i = 0;
  bool negative = false;
  if (!raw.empty() && (raw[0] == '+' || raw[0] == '-')) {
    negative = raw[0] == '-';
    i = 1;
  }
  if (i == raw.size()) return false;
  uint64_t value = 0;
  constexpr uint64_t kLimit = uint64_t(std::numeric_limits<int64_t>::max()) + 1;  // |INT64_MIN|
  for (; i < raw.size(); ++i) {
    char c = raw[i];
    if (c < '0' || c > '9') return false;
    uint64_t digit = uint64_t(c - '0');
    if (value > (kLimit - digit) / 10) return false;  // would exceed |INT64_MIN|
    value = value * 10 + digit;
  }
  if (!negative && value == kLimit) return false;
  out = negative ? (value == kLimit ? std::numeric_limits<int64_t>::min() : -int64_t(value)) : int64_t(value);
  return true;
}

// The byte offset to read the retained output from, or std::nullopt when Go
// answers 400 (a negative cursor; respond
// 400 INVALID_REQUEST_BODY "error seek file: seek <file>: invalid argument").
// `raw` is the decoded query value; std::nullopt or "" when absent.
inline std::optional<uint64_t> logs_cursor_offset(std::optional<std::string_view> raw) {
  int64_t cursor = 0;
  if (raw && !parse_go_decimal_int64(*raw, cursor)) cursor = 0;
  if (cursor < 0) return std::nullopt;
  return static_cast<uint64_t>(cursor);
}

}  // namespace execd::pty
