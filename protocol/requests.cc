// protocol/requests: see header.
#include "protocol/requests.h"

#include "protocol/resume.h"
#include "protocol/track_request.h"

#include <simdjson.h>

#include <cctype>
#include <cstring>

namespace execd::protocol {

namespace {

simdjson::dom::parser& shared_parser() {
  // One parser per thread: reuses its buffers across requests.
  thread_local simdjson::dom::parser parser;
  return parser;
}

std::string type_error(std::string_view field, std::string_view want) {
  return "invalid request, validation error: field '" + std::string(field) + "' must be " + std::string(want);
}

}  // namespace

const char* decode_track_changes(simdjson::dom::element v, std::vector<std::string>& out) {
  out.clear();
  if (v.is_null()) return nullptr;
  simdjson::dom::array roots;
  if (v.get(roots)) return "track_changes must be an array of directory paths";
  for (auto r : roots) {
    std::string_view s;
    if (r.get(s) || s.empty() || s.find('\0') != std::string_view::npos)
      return "track_changes must be an array of non-empty directory paths";
    if (out.size() >= kMaxTrackRoots) return "track_changes takes at most 16 roots";
    out.emplace_back(s);
  }
  return nullptr;
}

std::variant<CommandRequest, DecodeError> decode_command_request(std::string_view body) {
  if (body.empty()) return DecodeError{"invalid request body: empty body"};
  simdjson::dom::element root;
  auto err = shared_parser().parse(body.data(), body.size()).get(root);
  if (err) return DecodeError{std::string("invalid request body: ") + simdjson::error_message(err)};
  simdjson::dom::object obj;
  if (root.get(obj)) return DecodeError{"invalid request body: expected a JSON object"};

  CommandRequest req;
  bool has_argv = false;
  for (auto field : obj) {
    std::string_view key = field.key;
    simdjson::dom::element v = field.value;
    bool is_null = v.is_null();
    if (key == "command" || key == "cwd") {
      std::string_view s;
      if (is_null) continue;
      if (v.get(s)) return DecodeError{type_error(key, "a string")};
      (key == "command" ? req.command : req.cwd).assign(s);
    } else if (key == "argv") {
      if (is_null) continue;
      simdjson::dom::array arr;
      if (v.get(arr)) return DecodeError{type_error(key, "an array of strings")};
      for (auto item : arr) {
        std::string_view a;
        if (item.get(a)) return DecodeError{type_error(key, "an array of strings")};
        if (a.find('\0') != std::string_view::npos)
          return DecodeError{"invalid request, validation error: argv contains a NUL byte"};
        req.argv.emplace_back(a);
      }
      has_argv = true;
    } else if (key == "background" || key == "tty" || key == "stdin") {
      bool b;
      if (is_null) continue;
      if (v.get(b)) return DecodeError{type_error(key, "a boolean")};
      (key == "background" ? req.background : key == "tty" ? req.tty : req.stdin_open) = b;
    } else if (key == "id") {
      std::string_view s;
      if (is_null) continue;
      if (v.get(s)) return DecodeError{type_error(key, "a string")};
      if (!valid_client_id(s))
        return DecodeError{"invalid request, validation error: id must match [A-Za-z0-9._-]{1,128}"};
      req.id.assign(s);
    } else if (key == "timeout") {
      int64_t t;
      if (is_null) continue;
      if (v.get(t) || t < 0) return DecodeError{type_error(key, "a non-negative integer (milliseconds)")};
      req.timeout_ms = t;
    } else if (key == "uid" || key == "gid") {
      int64_t id;
      if (is_null) continue;
      if (v.get(id) || id < 0 || id > 0xFFFFFFFFll) return DecodeError{type_error(key, "an unsigned 32-bit integer")};
      (key == "uid" ? req.uid : req.gid) = static_cast<uint32_t>(id);
    } else if (key == "rows" || key == "cols") {
      int64_t n;
      if (is_null) continue;
      if (v.get(n) || n < 1 || n > 65535) return DecodeError{type_error(key, "an integer between 1 and 65535")};
      (key == "rows" ? req.rows : req.cols) = static_cast<uint16_t>(n);
    } else if (key == "limits") {
      if (is_null) continue;
      simdjson::dom::object lim;
      if (v.get(lim)) return DecodeError{type_error(key, "an object")};
      for (auto kv : lim) {
        int64_t n;
        std::string name(kv.key);
        int64_t* slot = name == "memory_bytes" ? &req.limit_memory_bytes
                        : name == "pids"       ? &req.limit_pids
                        : name == "cpu_shares" ? &req.limit_cpu_shares
                                               : nullptr;
        if (!slot)
          return DecodeError{"invalid request, validation error: limits." + name +
                             " is not a limit (memory_bytes, pids, cpu_shares)"};
        if (kv.value.is_null()) continue;
        if (kv.value.get(n) || n <= 0) return DecodeError{type_error("limits." + name, "a positive integer")};
        *slot = n;
      }
    } else if (key == "track_changes") {
      if (const char* why = decode_track_changes(v, req.track_changes))
        return DecodeError{std::string("invalid request, validation error: ") + why};
    } else if (key == "envs") {
      if (is_null) continue;
      simdjson::dom::object envs;
      if (v.get(envs)) return DecodeError{type_error(key, "an object of strings")};
      for (auto kv : envs) {
        std::string_view val;
        if (kv.value.get(val)) return DecodeError{type_error("envs." + std::string(kv.key), "a string")};
        if (kv.key.empty() || kv.key.find('=') != std::string_view::npos ||
            kv.key.find('\0') != std::string_view::npos || val.find('\0') != std::string_view::npos)
          return DecodeError{"invalid request, validation error: bad environment variable name or value"};
        req.envs[std::string(kv.key)] = std::string(val);
      }
    }
  }
  if (has_argv && !req.command.empty())
    return DecodeError{"invalid request, validation error: command and argv are mutually exclusive"};
  if (has_argv) {
    if (req.argv.empty() || req.argv[0].empty())
      return DecodeError{"invalid request, validation error: argv[0] is required"};
  } else {
    if (req.command.empty()) return DecodeError{"invalid request, validation error: command is required (or argv)"};
    if (req.command.find('\0') != std::string::npos)
      return DecodeError{"invalid request, validation error: command contains a NUL byte"};
  }
  if (req.gid && !req.uid) return DecodeError{"invalid request, validation error: uid is required when gid is provided"};
  if (req.cwd.find('\0') != std::string::npos)
    return DecodeError{"invalid request, validation error: cwd contains a NUL byte"};
  return req;
}

std::string command_text(const CommandRequest& req) {
  if (req.argv.empty()) return req.command;
  std::string out;
  for (const std::string& a : req.argv) {
    if (!out.empty()) out += ' ';
    bool plain = !a.empty();
    for (unsigned char c : a)
      if (!isalnum(c) && !strchr("_@%+=:,./-", c)) plain = false;
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += '\'';
  }
  return out;
}

namespace {

// The body as a JSON object (or why not). An empty body is an empty object
// when `empty_ok`.
const char* parse_object(std::string_view body, bool empty_ok, simdjson::dom::object& obj) {
  static const std::string_view kEmpty = "{}";
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    if (!empty_ok) return "invalid JSON body";
    body = kEmpty;
  }
  simdjson::dom::element root;
  if (shared_parser().parse(body.data(), body.size()).get(root) || root.get(obj)) return "invalid JSON body";
  return nullptr;
}

// Sets `out` from an optional string field; false if it is not a string.
bool optional_string(simdjson::dom::element v, std::string& out) {
  if (v.is_null()) return true;
  std::string_view sv;
  if (v.get(sv)) return false;
  out.assign(sv);
  return true;
}

}  // namespace

std::variant<SessionCreateRequest, DecodeError> decode_session_create(std::string_view body) {
  simdjson::dom::object obj;
  if (const char* err = parse_object(body, true, obj)) return DecodeError{err};
  SessionCreateRequest req;
  for (auto field : obj)
    if (field.key == "cwd" && !optional_string(field.value, req.cwd)) return DecodeError{"cwd must be a string"};
  return req;
}

std::variant<SessionRunRequest, DecodeError> decode_session_run(std::string_view body) {
  simdjson::dom::object obj;
  if (const char* err = parse_object(body, false, obj)) return DecodeError{err};
  SessionRunRequest req;
  for (auto field : obj) {
    std::string_view key = field.key;
    simdjson::dom::element v = field.value;
    if (key == "command") {
      if (!optional_string(v, req.command)) return DecodeError{"command must be a string"};
    } else if (key == "cwd") {
      if (!optional_string(v, req.cwd)) return DecodeError{"cwd must be a string"};
    } else if (key == "track_changes") {
      if (const char* why = decode_track_changes(v, req.track_changes)) return DecodeError{why};
    } else if (key == "timeout" && !v.is_null()) {
      int64_t t;
      if (v.get(t)) return DecodeError{"timeout must be an integer (ms)"};
      if (t < 0) return DecodeError{"timeout must be >= 0"};
      req.timeout_ms = t;
    }
  }
  if (req.command.empty()) return DecodeError{"command is required"};
  return req;
}

std::variant<PtyCreateRequest, DecodeError> decode_pty_create(std::string_view body) {
  simdjson::dom::object obj;
  if (const char* err = parse_object(body, true, obj)) return DecodeError{err};
  PtyCreateRequest req;
  for (auto field : obj) {
    if ((field.key == "cwd" && !optional_string(field.value, req.cwd)) ||
        (field.key == "command" && !optional_string(field.value, req.command)))
      return DecodeError{"cwd and command must be strings"};
  }
  return req;
}

}  // namespace execd::protocol
