// protocol/go_syntax: see header.
#include "protocol/go_syntax.h"

#include <limits>

namespace execd::protocol {

// Base 0: sign, then 0x/0o/0b/0 prefixes, and underscores as in Go literals
// (between digits or right after a prefix). Base 10: sign and digits only.
bool parse_go_int(std::string_view s, int base_in, int64_t& out) {
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.empty()) return false;
  int base = 10;
  size_t start = 0;
  if (base_in == 10) {
    for (char c : s)
      if (c < '0' || c > '9') return false;
  } else if (s.size() >= 2 && s[0] == '0') {
    char p = static_cast<char>(s[1] | 0x20);
    if (p == 'x') base = 16, start = 2;
    else if (p == 'o') base = 8, start = 2;
    else if (p == 'b') base = 2, start = 2;
    else base = 8;  // a leading 0 means octal
  }
  // Underscore placement (Go's underscoreOK).
  char saw = start ? '0' : '^';
  for (size_t i = start; i < s.size(); ++i) {
    char c = s[i];
    bool digit = (c >= '0' && c <= '9') || (base == 16 && (c | 0x20) >= 'a' && (c | 0x20) <= 'f');
    if (digit) saw = '0';
    else if (c == '_') {
      if (saw != '0') return false;
      saw = '_';
    } else {
      if (saw == '_') return false;
      saw = '!';
    }
  }
  if (saw == '_') return false;
  uint64_t value = 0;
  bool any = false;
  for (size_t i = start; i < s.size(); ++i) {
    char c = s[i];
    if (c == '_') continue;
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') d = (c | 0x20) - 'a' + 10;
    else return false;
    if (d >= base) return false;
    if (value > (std::numeric_limits<uint64_t>::max() - d) / base) return false;
    value = value * base + d;
    any = true;
  }
  if (!any) return false;
  constexpr uint64_t kMax = uint64_t(std::numeric_limits<int64_t>::max());
  if (negative) {
    if (value > kMax + 1) return false;
    out = value == kMax + 1 ? std::numeric_limits<int64_t>::min() : -static_cast<int64_t>(value);
  } else {
    if (value > kMax) return false;
    out = static_cast<int64_t>(value);
  }
  return true;
}

bool parse_go_bool(std::string_view s, bool& out) {
  for (std::string_view t : {"1", "t", "T", "TRUE", "true", "True"})
    if (s == t) return out = true, true;
  for (std::string_view f : {"0", "f", "F", "FALSE", "false", "False"})
    if (s == f) return out = false, true;
  return false;
}

}  // namespace execd::protocol
