// protocol/query_values: see header.
#include "protocol/query_values.h"

#include "protocol/go_syntax.h"

namespace execd::protocol {

std::optional<uint64_t> logs_cursor_offset(std::optional<std::string_view> raw) {
  int64_t cursor = 0;
  if (raw && !parse_go_int(*raw, 10, cursor)) cursor = 0;
  if (cursor < 0) return std::nullopt;
  return static_cast<uint64_t>(cursor);
}

namespace {
std::optional<std::string_view> non_empty(std::optional<std::string_view> v) {
  if (v && v->empty()) return std::nullopt;
  return v;
}
}  // namespace

std::optional<LineRangeParams> parse_line_range_params(std::optional<std::string_view> offset,
                                                       std::optional<std::string_view> limit,
                                                       std::optional<std::string_view> range_header,
                                                       std::string& error) {
  offset = non_empty(offset);
  limit = non_empty(limit);
  range_header = non_empty(range_header);
  LineRangeParams params;
  params.requested = offset.has_value() || limit.has_value();
  if (!params.requested) return params;
  if (range_header) {
    error = "line-based reading (offset/limit) and byte range (Range header) are mutually exclusive";
    return std::nullopt;
  }
  int64_t v = 0;
  if (offset) {
    if (!parse_go_int(*offset, 10, v) || v < 1) {
      error = "invalid query parameter 'offset': " + std::string(*offset);
      return std::nullopt;
    }
    params.offset = static_cast<uint64_t>(v);
  }
  if (limit) {
    if (!parse_go_int(*limit, 10, v) || v < 1) {
      error = "invalid query parameter 'limit': " + std::string(*limit);
      return std::nullopt;
    }
    params.limit = static_cast<uint64_t>(v);
  }
  return params;
}

}  // namespace execd::protocol
