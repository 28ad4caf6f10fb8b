// protocol/json_text: the hot-path JSON string writer and UTF-8 scanning used
// by the event envelopes. Escapes every C0 control, '"', '\\', DEL-free ASCII
// passes through, and U+0085, U+2028, U+2029 are written as \u escapes so that
// no client's line splitter (Python's str.splitlines splits on all three) can
// break an envelope in two.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace execd::protocol {

// Appends `s` as a quoted JSON string. `s` must be valid UTF-8.
void append_json_string(std::string& out, std::string_view s);

// Same, but invalid UTF-8 bytes become U+FFFD (the Go daemon's behaviour,
// used by the compat framing).
void append_json_string_lossy(std::string& out, std::string_view s);

// Length of the longest prefix of `data` that is complete, valid UTF-8.
size_t utf8_valid_prefix(const uint8_t* data, size_t len);

// If `data[0..len)` ends in the first bytes of a multi-byte sequence that is
// valid so far (could complete with more input), returns how many bytes that
// tail has (1..3); otherwise 0.
size_t utf8_incomplete_tail(const uint8_t* data, size_t len);

bool utf8_valid(std::string_view s);

}  // namespace execd::protocol
