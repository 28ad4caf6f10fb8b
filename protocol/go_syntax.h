// protocol/go_syntax: how Go's strconv reads integers and booleans, for
// everything execd must read exactly as the Go daemon did (query values,
// command-line flags). Pure.
#pragma once

#include <cstdint>
#include <string_view>

namespace execd::protocol {

// strconv.ParseInt(s, base, 64) for base 10 (optional sign, ASCII digits,
// int64 range) and base 0 (also 0x/0o/0b/0 prefixes and underscores as in Go
// literals). False on any error; `out` is then untouched.
bool parse_go_int(std::string_view s, int base, int64_t& out);

// strconv.ParseBool: 1 t T TRUE true True, 0 f F FALSE false False.
bool parse_go_bool(std::string_view s, bool& out);

}  // namespace execd::protocol
