// protocol/range.cc — Range header parsing (see range.h for the rules).
#include "protocol/range.h"
#include "protocol/http.h"

#include <limits>

namespace execd::protocol {
namespace {

// Parses a non-empty run of ASCII digits, saturating at UINT64_MAX.
std::optional<uint64_t> parse_number(std::string_view s) {
  if (s.empty()) return std::nullopt;
  uint64_t value = 0;
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    uint64_t digit = static_cast<uint64_t>(c - '0');
    value = value > (kMax - digit) / 10 ? kMax : value * 10 + digit;
  }
  return value;
}

}  // namespace

RangeResult parse_range_header(std::optional<std::string_view> header, uint64_t file_size) {
  RangeResult malformed{RangeOutcome::malformed};
  if (!header) return {};
  std::string_view value = trim_ows(*header);
  if (value.empty()) return {};
  constexpr std::string_view kPrefix = "bytes=";
  if (!value.starts_with(kPrefix)) return malformed;
  value.remove_prefix(kPrefix.size());

  std::optional<RangeResult> first_satisfiable;
  bool any_spec = false;
  while (true) {
    size_t comma = value.find(',');
    std::string_view spec = trim_ows(value.substr(0, comma));
    if (!spec.empty()) {
      any_spec = true;
      size_t dash = spec.find('-');
      if (dash == std::string_view::npos) return malformed;
      std::string_view start_text = trim_ows(spec.substr(0, dash));
      std::string_view end_text = trim_ows(spec.substr(dash + 1));
      if (start_text.empty()) {
        // Suffix range: the last N bytes.
        auto suffix = parse_number(end_text);
        if (!suffix) return malformed;
        uint64_t n = *suffix < file_size ? *suffix : file_size;
        if (n > 0 && !first_satisfiable) {
          first_satisfiable = RangeResult{RangeOutcome::satisfiable, file_size - n, file_size - 1};
        }
      } else {
        auto start = parse_number(start_text);
        if (!start) return malformed;
        uint64_t end = std::numeric_limits<uint64_t>::max();
        if (!end_text.empty()) {
          auto parsed_end = parse_number(end_text);
          if (!parsed_end || *parsed_end < *start) return malformed;
          end = *parsed_end;
        }
        if (*start < file_size && !first_satisfiable) {
          uint64_t last = end < file_size - 1 ? end : file_size - 1;
          first_satisfiable = RangeResult{RangeOutcome::satisfiable, *start, last};
        }
      }
    }
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  if (!any_spec) return malformed;
  if (first_satisfiable) return *first_satisfiable;
  return RangeResult{RangeOutcome::unsatisfiable};
}

}  // namespace execd::protocol
