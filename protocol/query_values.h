// protocol/query_values: query values the Go execd v1.0.19 read with its
// own rules, decoded exactly so: the `cursor` of GET /command/{id}/logs and
// the `offset`/`limit` of GET /files/download. Pure.
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
#include <string>
#include <optional>
#include <string_view>

namespace execd::protocol {

// The byte offset to read the retained output from, or std::nullopt when Go
// answers 400 (a negative cursor; respond
// 400 INVALID_REQUEST_BODY "error seek file: seek <file>: invalid argument").
// `raw` is the decoded query value; std::nullopt or "" when absent.
std::optional<uint64_t> logs_cursor_offset(std::optional<std::string_view> raw);

// GET /files/download?offset=N&limit=M: lines offset .. offset+limit-1.
struct LineRangeParams {
  bool requested = false;  // offset or limit was given (a non-empty value)
  uint64_t offset = 1;     // first line, 1-based (default 1)
  uint64_t limit = 0;      // at most this many lines; 0 = to the end of the file
};
// Validates the query values. Pass std::nullopt for an absent parameter or
// header; an empty value counts as absent (Go reads c.Query(..) == "").
// Checks in Go's order; each failure is a 400 INVALID_REQUEST_BODY with
// Go's message, returned in `error`:
//   1. offset or limit together with a non-empty Range header ->
//      "line-based reading (offset/limit) and byte range (Range header) are mutually exclusive"
//   2. offset not an integer (strconv.ParseInt base 10) or < 1 ->
//      "invalid query parameter 'offset': <raw>"
//   3. the same for limit -> "invalid query parameter 'limit': <raw>"
// Neither given -> {requested = false}: serve the plain download.
// Go opens the file between steps 1 and 2, so a missing file with a bad
// offset is 404 there; the handler tries the open first on such an error.
std::optional<LineRangeParams> parse_line_range_params(std::optional<std::string_view> offset,
                                                       std::optional<std::string_view> limit,
                                                       std::optional<std::string_view> range_header,
                                                       std::string& error);

}  // namespace execd::protocol
