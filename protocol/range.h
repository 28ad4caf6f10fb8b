// protocol/range.h — parsing an HTTP `Range: bytes=...` header against a
// known file size (for /files/download).
//
// Only the FIRST satisfiable spec is served (multi-range requests never get a
// multipart/byteranges answer), matching the Go daemon.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace execd::protocol {

enum class RangeOutcome {
  none,           // no header / empty header: serve the whole file (200)
  satisfiable,    // serve `first..last` (206, Content-Range: bytes F-L/SIZE)
  unsatisfiable,  // syntactically valid but nothing overlaps (416, Content-Range: bytes */SIZE)
  malformed,      // not "bytes=" / bad numbers / last < first / missing '-' (Go: 416 {"code":"UNKNOWN"})
};

struct RangeResult {
  RangeOutcome outcome = RangeOutcome::none;
  uint64_t first = 0;  // inclusive, valid when satisfiable
  uint64_t last = 0;   // inclusive, valid when satisfiable
  uint64_t length() const { return last - first + 1; }
};

// `header` = the Range header value; nullopt when the header is absent.
// Specs: "a-b" (b >= a, b clamped to size-1), "a-" (to EOF), "-n" (last n bytes,
// n clamped to size; "-0" is unsatisfiable). Specs starting at/after EOF are
// skipped. Any malformed spec makes the whole header malformed. Numbers too
// large for 64 bits saturate (so they clamp / become unsatisfiable).
RangeResult parse_range_header(std::optional<std::string_view> header, uint64_t file_size);

}  // namespace execd::protocol
