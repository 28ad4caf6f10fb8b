// protocol/operations: see header.
#include "protocol/operations.h"

#include <simdjson.h>

#include <cstdint>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>

#include "protocol/sha.h"

namespace execd::protocol {

namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kShapeMessage =
    "operation_id must contain instance, server timestamp, and an 8-128 character random token";

ApiError bad_identity(std::string_view message) {
  return ApiError{400, std::string(operation_codes::kInvalidId), std::string(message)};
}

bool token_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

// Go's strconv.ParseInt(s, 10, 64) >= 0 whose FormatInt gives `s` back: plain
// digits, no sign, no leading zero, within int64.
std::optional<int64_t> canonical_seconds(std::string_view s) {
  if (s.empty() || s.size() > 19 || (s.size() > 1 && s[0] == '0')) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  return static_cast<int64_t>(v);
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Where the first JSON value of `s` from `i` ends, by its structure alone
// (strings, brackets; simdjson validates it afterwards); npos when the body
// ends inside it. Iterative: a hostile nesting depth costs a counter.
size_t first_value_end(std::string_view s, size_t i) {
  auto skip_string = [&s](size_t j) -> size_t {  // j at the opening quote
    for (++j; j < s.size(); ++j) {
      if (s[j] == '\\') ++j;
      else if (s[j] == '"') return j + 1;
    }
    return std::string_view::npos;
  };
  char c = s[i];
  if (c == '"') return skip_string(i);
  if (c != '{' && c != '[') {
    while (i < s.size() && !is_space(s[i]) && !strchr("{}[],:\"", s[i])) ++i;
    return i;
  }
  size_t depth = 0;
  while (i < s.size()) {
    c = s[i];
    if (c == '"') {
      i = skip_string(i);
      if (i == std::string_view::npos) return i;
      continue;
    }
    if (c == '{' || c == '[') ++depth;
    else if ((c == '}' || c == ']') && --depth == 0) return i + 1;
    ++i;
  }
  return std::string_view::npos;
}

simdjson::dom::parser& keyed_parser() {
  thread_local simdjson::dom::parser parser;
  return parser;
}

// The steps every keyed body goes through, in upstream's order: size, one
// value, an object, nothing after it, a nonempty operation_id. `value` is
// the first value's text.
const char* keyed_object(std::string_view body, simdjson::dom::object& obj, std::string_view& value,
                         std::string& operation_id) {
  if (body.size() > kMaxOperationBody) return "operation creation body exceeds 1 MiB";
  size_t start = 0;
  while (start < body.size() && is_space(body[start])) ++start;
  if (start == body.size()) return "EOF";
  size_t end = first_value_end(body, start);
  if (end == std::string_view::npos) return "invalid creation body";
  value = body.substr(start, end - start);
  simdjson::dom::element root;
  if (keyed_parser().parse(value.data(), value.size()).get(root)) return "invalid creation body";
  bool null_root = root.is_null();
  if (!null_root && root.get(obj)) return "invalid creation JSON";
  for (size_t i = end; i < body.size(); ++i)
    if (!is_space(body[i])) return "unexpected trailing creation data";
  std::string_view id;
  if (null_root || obj["operation_id"].get(id) || id.empty()) return "operation_id must be a nonempty string";
  operation_id.assign(id);
  return nullptr;
}

bool string_or_null(simdjson::dom::element v) { return v.is_null() || v.is_string(); }
bool int_or_null(simdjson::dom::element v) { return v.is_null() || v.is_int64() || v.is_uint64(); }
bool bool_or_null(simdjson::dom::element v) { return v.is_null() || v.is_bool(); }
bool uint32_or_null(simdjson::dom::element v) {
  if (v.is_null()) return true;
  int64_t n;
  return !v.get(n) && n >= 0 && n <= 0xFFFFFFFFll;
}

// The fields of a keyed command body, each of a type it may have (Go's
// strict decoding into RunCommandRequest, plus execd's own fields; `id` is
// not one: the handle is execd's). Not null: command, argv and argv's items.
bool command_fields_ok(simdjson::dom::object obj) {
  bool command = false, argv = false;
  for (auto field : obj) {
    std::string_view k = field.key;
    simdjson::dom::element v = field.value;
    bool ok;
    if (k == "operation_id") ok = true;
    else if (k == "command") ok = command = v.is_string();
    else if (k == "argv") {
      simdjson::dom::array a;
      ok = argv = !v.get(a);
      if (ok)
        for (auto item : a) ok = ok && item.is_string();
    } else if (k == "cwd") ok = string_or_null(v);
    else if (k == "background" || k == "tty" || k == "stdin") ok = bool_or_null(v);
    else if (k == "timeout" || k == "rows" || k == "cols") ok = int_or_null(v);
    else if (k == "uid" || k == "gid") ok = uint32_or_null(v);
    else if (k == "envs" || k == "limits") ok = v.is_null() || v.is_object();
    else if (k == "track_changes") ok = v.is_null() || v.is_array();
    else ok = false;
    if (!ok) return false;
  }
  return !(command && argv);
}

}  // namespace

std::variant<int64_t, ApiError> check_operation_identity(std::string_view identity, std::string_view instance_id,
                                                         int64_t now) {
  size_t a = identity.find('.');
  size_t b = a == std::string_view::npos ? a : identity.find('.', a + 1);
  if (b == std::string_view::npos || identity.find('.', b + 1) != std::string_view::npos)
    return bad_identity(kShapeMessage);
  std::string_view instance = identity.substr(0, a), seconds = identity.substr(a + 1, b - a - 1),
                   token = identity.substr(b + 1);
  if (instance.size() != 32 || token.size() < 8 || token.size() > 128) return bad_identity(kShapeMessage);
  for (char c : token)
    if (!token_char(c)) return bad_identity(kShapeMessage);
  std::optional<int64_t> issued = canonical_seconds(seconds);
  if (!issued) return bad_identity("invalid operation timestamp");
  if (instance != instance_id)
    return ApiError{409, std::string(operation_codes::kInstanceMismatch),
                    "execd instance changed or identity belongs to another sandbox; previous execution outcome is "
                    "unknown, do not retry with a new identity"};
  if (*issued > now) return bad_identity("operation timestamp is in the future; use the server-issued timestamp");
  return *issued;
}

std::variant<KeyedCommand, DecodeError> decode_keyed_command(std::string_view body) {
  simdjson::dom::object obj;
  std::string_view value;
  KeyedCommand out;
  if (const char* err = keyed_object(body, obj, value, out.operation_id)) return DecodeError{err};
  if (!command_fields_ok(obj)) return DecodeError{"invalid creation fields"};
  // The object is well-typed: what is left is the ordinary validation.
  auto decoded = decode_command_request(value);
  if (std::holds_alternative<DecodeError>(decoded)) return DecodeError{std::string(kInvalidCommandRequest)};
  out.request = std::move(std::get<CommandRequest>(decoded));
  // Go keeps the timeout as a Duration in nanoseconds.
  if (out.request.timeout_ms > INT64_MAX / 1000000) return DecodeError{std::string(kInvalidCommandRequest)};
  return out;
}

std::variant<KeyedPty, DecodeError> decode_keyed_pty(std::string_view body) {
  simdjson::dom::object obj;
  std::string_view value;
  KeyedPty out;
  if (const char* err = keyed_object(body, obj, value, out.operation_id)) return DecodeError{err};
  for (auto field : obj) {
    std::string_view k = field.key;
    bool ok = k == "operation_id" || ((k == "cwd" || k == "command") && string_or_null(field.value));
    if (!ok) return DecodeError{"invalid creation fields"};
  }
  auto decoded = decode_pty_create(value);
  if (std::holds_alternative<DecodeError>(decoded)) return DecodeError{"invalid creation fields"};
  out.request = std::move(std::get<PtyCreateRequest>(decoded));
  return out;
}

std::string pty_fingerprint(const PtyCreateRequest& req) {
  ojson j;
  j["cwd"] = req.cwd;
  j["command"] = req.command;
  return sha256_hex(j.dump(-1, ' ', false, ojson::error_handler_t::replace));
}

std::string execution_instance_json(std::string_view instance_id, int64_t issued_at, uint64_t capacity) {
  ojson j;
  j["instance_id"] = instance_id;
  j["issued_at"] = issued_at;
  j["retention_seconds"] = kOperationRetentionSeconds;
  j["capacity"] = capacity;
  return j.dump();
}

std::string execution_operation_json(std::string_view id, std::string_view kind, std::string_view state,
                                     int64_t expires_at) {
  time_t t = static_cast<time_t>(expires_at);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char when[32];
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  ojson j;
  j["id"] = id;
  j["kind"] = kind;
  j["state"] = state;
  j["expires_at"] = when;
  return j.dump();
}

}  // namespace execd::protocol
