// protocol/file_requests: see header.
#include "protocol/file_requests.h"

#include <simdjson.h>

#include <algorithm>
#include <map>

namespace execd::protocol {

namespace {

simdjson::dom::parser& parser() {
  thread_local simdjson::dom::parser p;
  return p;
}

// Where the JSON value starting at `at` ends (one past it), or npos if the
// body ends first. Strings with their escapes, nesting by brackets; a bare
// scalar ends at the first delimiter.
size_t value_end(std::string_view s, size_t at) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = at; i < s.size(); ++i) {
    char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') {
        in_string = false;
        if (depth == 0) return i + 1;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '{':
      case '[':
        ++depth;
        break;
      case '}':
      case ']':
        if (--depth <= 0) return depth == 0 ? i + 1 : i;
        break;
      case ' ':
      case '\t':
      case '\r':
      case '\n':
      case ',':
      case ':':
        if (depth == 0) return i;
        break;
      default:
        break;
    }
  }
  return depth == 0 && !in_string ? s.size() : std::string_view::npos;
}

DecodeError bad(std::string message) { return DecodeError{std::move(message)}; }

// Parses the first value of `body` into `root`; "" on success.
std::string parse_first(std::string_view body, simdjson::dom::element& root) {
  std::string error;
  auto value = first_json_value(body, error);
  if (!value) return error;
  // simdjson wants padding past the end: parse a copy.
  auto err = parser().parse(std::string(*value)).get(root);
  if (err) return std::string("invalid JSON: ") + simdjson::error_message(err);
  return {};
}

// A string field that may be absent or null.
std::optional<std::string> string_field(simdjson::dom::object obj, std::string_view key, const std::string& context,
                                        std::string& error) {
  simdjson::dom::element v;
  if (obj[key].get(v) || v.is_null()) return std::nullopt;
  std::string_view s;
  if (v.get(s)) {
    error = context + ": '" + std::string(key) + "' must be a string";
    return std::nullopt;
  }
  return std::string(s);
}

// The permissions of one object; "" or the reason it is refused.
std::string permissions_from(simdjson::dom::element e, FilePermissions& out) {
  simdjson::dom::object obj;
  if (e.get(obj)) return "permission entry must be a JSON object";
  for (const char* key : {"owner", "group"}) {
    simdjson::dom::element v;
    if (obj[key].get(v) || v.is_null()) continue;
    std::string_view s;
    if (v.get(s)) return std::string("'") + key + "' must be a string";
    if (!s.empty()) (std::string_view(key) == "owner" ? out.owner : out.group) = std::string(s);
  }
  simdjson::dom::element mode;
  if (!obj["mode"].get(mode) && !mode.is_null()) {
    int64_t digits = 0;
    if (mode.is_int64()) digits = mode.get_int64().value();
    else if (mode.is_uint64()) digits = 7778;  // above int64: certainly too large
    else return "'mode' must be an integer of octal digits, e.g. 755";
    std::string error;
    auto m = mode_from_octal_digits(digits, error);
    if (!m) return error;
    out.mode = *m;
  }
  return {};
}

// The members of an object in key order, the last of a repeated key winning.
std::map<std::string, simdjson::dom::element> members(simdjson::dom::object obj) {
  std::map<std::string, simdjson::dom::element> out;
  for (auto field : obj) out[std::string(field.key)] = field.value;
  return out;
}

}  // namespace

std::optional<std::string_view> first_json_value(std::string_view body, std::string& error) {
  size_t start = body.find_first_not_of(" \t\r\n");
  if (start == std::string_view::npos) {
    error = "request body is empty";
    return std::nullopt;
  }
  size_t end = value_end(body, start);
  if (end == std::string_view::npos || end == start) {
    error = "invalid JSON: unexpected end of input";
    return std::nullopt;
  }
  return body.substr(start, end - start);
}

std::optional<uint32_t> mode_from_octal_digits(int64_t digits, std::string& error) {
  if (digits < 0 || digits > 7777) {
    error = "invalid mode " + std::to_string(digits) + ": expected up to four octal digits, e.g. 755";
    return std::nullopt;
  }
  uint32_t mode = 0, shift = 0;
  for (int64_t rest = digits; rest != 0; rest /= 10) {
    int64_t digit = rest % 10;
    if (digit > 7) {
      error = "invalid mode " + std::to_string(digits) + ": digits must be octal (0-7)";
      return std::nullopt;
    }
    mode |= static_cast<uint32_t>(digit) << shift;
    shift += 3;
  }
  return mode;
}

std::variant<PermissionList, DecodeError> decode_permission_map(std::string_view body) {
  simdjson::dom::element root;
  if (auto e = parse_first(body, root); !e.empty()) return bad(e);
  simdjson::dom::object obj;
  if (root.get(obj)) return bad("request body must be a JSON object");
  PermissionList out;
  for (auto& [path, value] : members(obj)) {
    FilePermissions p;
    if (auto e = permissions_from(value, p); !e.empty()) return bad(path + ": " + e);
    out.emplace_back(path, std::move(p));
  }
  return out;
}

std::variant<std::vector<MoveItem>, DecodeError> decode_move_list(std::string_view body) {
  simdjson::dom::element root;
  if (auto e = parse_first(body, root); !e.empty()) return bad(e);
  simdjson::dom::array arr;
  if (root.get(arr)) return bad("request body must be a JSON array");
  std::vector<MoveItem> out;
  size_t i = 0;
  for (simdjson::dom::element item : arr) {
    std::string context = "item " + std::to_string(i++);
    simdjson::dom::object obj;
    if (item.get(obj)) return bad(context + " must be a JSON object");
    std::string error;
    auto src = string_field(obj, "src", context, error);
    if (!error.empty()) return bad(error);
    auto dest = string_field(obj, "dest", context, error);
    if (!error.empty()) return bad(error);
    out.push_back({src.value_or(""), dest.value_or("")});
  }
  return out;
}

std::variant<std::vector<ReplaceItem>, DecodeError> decode_replace_map(std::string_view body) {
  simdjson::dom::element root;
  if (auto e = parse_first(body, root); !e.empty()) return bad(e);
  simdjson::dom::object obj;
  if (root.get(obj)) return bad("request body must be a JSON object");
  std::vector<ReplaceItem> out;
  for (auto& [path, value] : members(obj)) {
    simdjson::dom::object entry;
    if (value.get(entry)) return bad(path + ": entry must be a JSON object");
    std::string error;
    auto old_text = string_field(entry, "old", path, error);
    if (!error.empty()) return bad(error);
    auto new_text = string_field(entry, "new", path, error);
    if (!error.empty()) return bad(error);
    out.push_back({path, old_text.value_or(""), new_text.value_or("")});
  }
  return out;
}

std::variant<UploadMetadata, DecodeError> decode_upload_metadata(std::string_view text) {
  simdjson::dom::element root;
  if (auto e = parse_first(text, root); !e.empty()) return bad("invalid metadata format. " + e);
  simdjson::dom::object obj;
  if (root.get(obj)) return bad("invalid metadata format. metadata must be a JSON object");
  UploadMetadata m;
  simdjson::dom::element path;
  std::string_view p;
  if (obj["path"].get(path) || path.get(p) || p.empty()) return bad("metadata path is empty");
  m.path = std::string(p);
  if (auto e = permissions_from(root, m.permissions); !e.empty()) return bad(e);
  return m;
}

}  // namespace execd::protocol
