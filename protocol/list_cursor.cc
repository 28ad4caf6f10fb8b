// protocol/list_cursor: see header.
#include "protocol/list_cursor.h"

#include <cstdlib>

namespace execd::protocol {
namespace {
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}
}  // namespace

std::string encode_list_cursor(std::string_view filter, const ListPosition& after) {
  std::string plain = "1\n" + std::string(filter) + "\n" + std::to_string(after.started_ns) + "\n" + after.id;
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(plain.size() * 2);
  for (unsigned char c : plain) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::optional<ListPosition> decode_list_cursor(std::string_view cursor, std::string_view filter) {
  if (cursor.empty() || cursor.size() % 2 || cursor.size() > 1024) return std::nullopt;
  std::string plain;
  for (size_t i = 0; i < cursor.size(); i += 2) {
    int hi = hex_value(cursor[i]), lo = hex_value(cursor[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    plain += static_cast<char>(hi << 4 | lo);
  }
  // "1\n<filter>\n<started_ns>\n<id>"
  std::string_view rest = plain;
  auto field = [&rest]() -> std::optional<std::string_view> {
    size_t nl = rest.find('\n');
    if (nl == std::string_view::npos) return std::nullopt;
    std::string_view f = rest.substr(0, nl);
    rest.remove_prefix(nl + 1);
    return f;
  };
  auto version = field(), made_for = field(), started = field();
  if (!version || *version != "1" || !made_for || *made_for != filter || !started || started->empty()) return std::nullopt;
  ListPosition pos;
  std::string number(*started);
  char* end = nullptr;
  long long ns = strtoll(number.c_str(), &end, 10);
  if (*end != '\0') return std::nullopt;
  pos.started_ns = ns;
  pos.id.assign(rest);
  return pos;
}

}  // namespace execd::protocol
