// protocol/list_cursor: the opaque cursor of a paged listing (GET /command):
// where the last page ended, in the listing's order (start time, then id),
// bound to the filter it was made for so that a cursor reused with another
// filter is refused instead of silently skipping. Hex on the wire: safe in
// a query string, and nothing a client should parse.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace execd::protocol {

struct ListPosition {
  int64_t started_ns = 0;
  std::string id;
  // Strictly after this position in (started_ns, id) order.
  bool before(int64_t other_started_ns, std::string_view other_id) const {
    return started_ns < other_started_ns || (started_ns == other_started_ns && id < other_id);
  }
};

std::string encode_list_cursor(std::string_view filter, const ListPosition& after);
// nullopt: not a cursor, or one made for another filter.
std::optional<ListPosition> decode_list_cursor(std::string_view cursor, std::string_view filter);

}  // namespace execd::protocol
