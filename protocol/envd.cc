// protocol/envd: see header.
#include "protocol/envd.h"

#include <sys/stat.h>

#include <simdjson.h>

#include "protocol/base64.h"
#include "protocol/json_text.h"

namespace execd::protocol::envd {

namespace dom = simdjson::dom;

namespace {

dom::parser& shared_parser() {
  thread_local dom::parser parser;
  return parser;
}

using Err = std::optional<DecodeError>;

DecodeError bad(std::string_view field, std::string_view want) {
  return DecodeError{"invalid value for field '" + std::string(field) + "': expected " + std::string(want)};
}

// The JSON name or the proto name of a field.
bool is(std::string_view key, std::string_view json_name, std::string_view proto_name = {}) {
  return key == json_name || (!proto_name.empty() && key == proto_name);
}

Err parse_object(std::string_view json, dom::object& out) {
  dom::element root;
  if (auto err = shared_parser().parse(json.data(), json.size()).get(root))
    return DecodeError{std::string("invalid JSON: ") + simdjson::error_message(err)};
  if (root.get(out)) return DecodeError{"invalid message: expected a JSON object"};
  return std::nullopt;
}

Err read_string(dom::element v, std::string_view field, std::string& out) {
  if (v.is_null()) {
    out.clear();
    return std::nullopt;
  }
  std::string_view s;
  if (v.get(s)) return bad(field, "a string");
  out.assign(s);
  return std::nullopt;
}

Err read_bool(dom::element v, std::string_view field, bool& out) {
  if (v.is_null()) {
    out = false;
    return std::nullopt;
  }
  if (v.get(out)) return bad(field, "a boolean");
  return std::nullopt;
}

// uint32: a JSON number with an integral value in range, or such a number
// as a decimal string.
Err read_u32(dom::element v, std::string_view field, uint32_t& out) {
  if (v.is_null()) {
    out = 0;
    return std::nullopt;
  }
  uint64_t u = 0;
  if (v.is_uint64()) {
    u = v.get_uint64().value_unsafe();
  } else if (v.is_int64()) {
    return bad(field, "an unsigned 32-bit integer");
  } else if (v.is_double()) {
    double d = v.get_double().value_unsafe();
    if (!(d >= 0 && d <= 4294967295.0) || d != static_cast<double>(static_cast<uint64_t>(d)))
      return bad(field, "an unsigned 32-bit integer");
    u = static_cast<uint64_t>(d);
  } else if (v.is_string()) {
    std::string_view s = v.get_string().value_unsafe();
    if (s.empty() || s.size() > 10) return bad(field, "an unsigned 32-bit integer");
    for (char c : s) {
      if (c < '0' || c > '9') return bad(field, "an unsigned 32-bit integer");
      u = u * 10 + static_cast<uint64_t>(c - '0');
    }
  } else {
    return bad(field, "an unsigned 32-bit integer");
  }
  if (u > UINT32_MAX) return bad(field, "an unsigned 32-bit integer");
  out = static_cast<uint32_t>(u);
  return std::nullopt;
}

Err read_bytes(dom::element v, std::string_view field, std::string& out) {
  if (v.is_null()) {
    out.clear();
    return std::nullopt;
  }
  std::string_view s;
  if (v.get(s)) return bad(field, "base64 bytes");
  auto decoded = decode_proto_bytes(s);
  if (!decoded) return bad(field, "base64 bytes");
  out = std::move(*decoded);
  return std::nullopt;
}

// An object field that may be null (then absent).
Err read_object(dom::element v, std::string_view field, std::optional<dom::object>& out) {
  if (v.is_null()) return std::nullopt;
  dom::object o;
  if (v.get(o)) return bad(field, "an object");
  out = o;
  return std::nullopt;
}

Err read_selector(dom::element v, ProcessSelector& out) {
  std::optional<dom::object> o;
  if (auto e = read_object(v, "process", o)) return e;
  if (!o) return std::nullopt;
  for (auto f : *o) {
    if (f.value.is_null()) continue;
    if (is(f.key, "pid")) {
      if (out.pid || out.tag) return DecodeError{"process selector: more than one of pid and tag"};
      uint32_t pid;
      if (auto e = read_u32(f.value, "pid", pid)) return e;
      out.pid = pid;
    } else if (is(f.key, "tag")) {
      if (out.pid || out.tag) return DecodeError{"process selector: more than one of pid and tag"};
      std::string tag;
      if (auto e = read_string(f.value, "tag", tag)) return e;
      out.tag = std::move(tag);
    }
  }
  return std::nullopt;
}

Err read_pty(dom::element v, std::optional<PtySize>& out) {
  std::optional<dom::object> o;
  if (auto e = read_object(v, "pty", o)) return e;
  if (!o) return std::nullopt;
  out.emplace();
  for (auto f : *o) {
    if (!is(f.key, "size")) continue;
    std::optional<dom::object> size;
    if (auto e = read_object(f.value, "size", size)) return e;
    if (!size) continue;
    for (auto g : *size) {
      if (is(g.key, "cols")) {
        if (auto e = read_u32(g.value, "cols", out->cols)) return e;
      } else if (is(g.key, "rows")) {
        if (auto e = read_u32(g.value, "rows", out->rows)) return e;
      }
    }
  }
  return std::nullopt;
}

Err read_input(dom::element v, ProcessInput& out) {
  std::optional<dom::object> o;
  if (auto e = read_object(v, "input", o)) return e;
  if (!o) return std::nullopt;
  for (auto f : *o) {
    if (f.value.is_null()) continue;
    bool stdin_field = is(f.key, "stdin"), pty_field = is(f.key, "pty");
    if (!stdin_field && !pty_field) continue;
    if (out.kind != ProcessInput::Kind::none) return DecodeError{"process input: more than one of stdin and pty"};
    if (auto e = read_bytes(f.value, f.key, out.data)) return e;
    out.kind = stdin_field ? ProcessInput::Kind::stdin_bytes : ProcessInput::Kind::pty_bytes;
  }
  return std::nullopt;
}

Err read_config(dom::element v, ProcessConfig& out) {
  std::optional<dom::object> o;
  if (auto e = read_object(v, "process", o)) return e;
  if (!o) return std::nullopt;
  for (auto f : *o) {
    if (is(f.key, "cmd")) {
      if (auto e = read_string(f.value, "cmd", out.cmd)) return e;
    } else if (is(f.key, "args")) {
      if (f.value.is_null()) continue;
      dom::array a;
      if (f.value.get(a)) return bad("args", "an array of strings");
      for (auto item : a) {
        std::string_view s;
        if (item.get(s)) return bad("args", "an array of strings");
        out.args.emplace_back(s);
      }
    } else if (is(f.key, "envs")) {
      if (f.value.is_null()) continue;
      dom::object m;
      if (f.value.get(m)) return bad("envs", "an object of strings");
      for (auto kv : m) {
        std::string_view s;
        if (kv.value.get(s)) return bad("envs", "an object of strings");
        out.envs[std::string(kv.key)] = std::string(s);
      }
    } else if (is(f.key, "cwd")) {
      if (f.value.is_null()) continue;
      std::string cwd;
      if (auto e = read_string(f.value, "cwd", cwd)) return e;
      out.cwd = std::move(cwd);
    }
  }
  return std::nullopt;
}

Err read_watch_fields(std::string_view key, dom::element v, WatchRequest& out) {
  if (is(key, "path")) return read_string(v, "path", out.path);
  if (is(key, "recursive")) return read_bool(v, "recursive", out.recursive);
  if (is(key, "includeEntry", "include_entry")) return read_bool(v, "includeEntry", out.include_entry);
  if (is(key, "allowNetworkMounts", "allow_network_mounts"))
    return read_bool(v, "allowNetworkMounts", out.allow_network_mounts);
  return std::nullopt;
}

// Strings the client or the file system gave us (paths, names) may not be
// valid UTF-8; proto strings must be, so invalid bytes become U+FFFD.
void str(std::string& out, std::string_view s) { append_json_string_lossy(out, s); }

void append_bytes(std::string& out, const uint8_t* data, size_t len) {
  out += '"';
  append_base64(out, data, len);
  out += '"';
}

// Writes `"name":` with a separating comma when needed.
struct Fields {
  std::string& out;
  bool first = true;
  void name(std::string_view n) {
    if (!first) out += ',';
    first = false;
    out += '"';
    out.append(n);
    out += "\":";
  }
};

}  // namespace

// ---------------------------------------------------------------------------
// process requests

std::variant<StartRequest, DecodeError> decode_start(std::string_view json) {
  dom::object o;
  if (auto e = parse_object(json, o)) return *e;
  StartRequest req;
  for (auto f : o) {
    Err e;
    if (is(f.key, "process")) {
      e = read_config(f.value, req.process);
    } else if (is(f.key, "pty")) {
      e = read_pty(f.value, req.pty);
    } else if (is(f.key, "tag")) {
      if (!f.value.is_null()) {
        std::string tag;
        e = read_string(f.value, "tag", tag);
        req.tag = std::move(tag);
      }
    } else if (is(f.key, "stdin")) {
      if (!f.value.is_null()) {
        bool b = false;
        e = read_bool(f.value, "stdin", b);
        req.stdin_open = b;
      }
    }
    if (e) return *e;
  }
  return req;
}

std::variant<SelectorRequest, DecodeError> decode_selector_request(std::string_view json) {
  dom::object o;
  if (auto e = parse_object(json, o)) return *e;
  SelectorRequest req;
  for (auto f : o)
    if (is(f.key, "process"))
      if (auto e = read_selector(f.value, req.process)) return *e;
  return req;
}

std::variant<UpdateRequest, DecodeError> decode_update(std::string_view json) {
  dom::object o;
  if (auto e = parse_object(json, o)) return *e;
  UpdateRequest req;
  for (auto f : o) {
    Err e;
    if (is(f.key, "process")) e = read_selector(f.value, req.process);
    else if (is(f.key, "pty")) e = read_pty(f.value, req.pty);
    if (e) return *e;
  }
  return req;
}

std::variant<SendInputRequest, DecodeError> decode_send_input(std::string_view json) {
  dom::object o;
  if (auto e = parse_object(json, o)) return *e;
  SendInputRequest req;
  for (auto f : o) {
    Err e;
    if (is(f.key, "process")) e = read_selector(f.value, req.process);
    else if (is(f.key, "input")) e = read_input(f.value, req.input);
    if (e) return *e;
  }
  return req;
}

std::variant<SendSignalRequest, DecodeError> decode_send_signal(std::string_view json) {
  dom::object o;
  if (auto e = parse_object(json, o)) return *e;
  SendSignalRequest req;
  for (auto f : o) {
    if (is(f.key, "process")) {
      if (auto e = read_selector(f.value, req.process)) return *e;
    } else if (is(f.key, "signal")) {
      if (f.value.is_null()) continue;
      std::string_view name;
      int64_t n = 0;
      if (!f.value.get(name)) {
        if (name == "SIGNAL_UNSPECIFIED") req.signal = 0;
        else if (name == "SIGNAL_SIGTERM") req.signal = 15;
        else if (name == "SIGNAL_SIGKILL") req.signal = 9;
        else return bad("signal", "SIGNAL_SIGTERM or SIGNAL_SIGKILL");
      } else if (!f.value.get(n)) {
        // An enum's number is valid proto3 JSON too; unknown numbers are kept
        // as they are (open enums) and refused by the handler.
        if (n < 0 || n > 64) return bad("signal", "SIGNAL_SIGTERM or SIGNAL_SIGKILL");
        req.signal = static_cast<int>(n);
      } else {
        return bad("signal", "an enum name or number");
      }
    } else if (is(f.key, "descendants")) {
      if (auto e = read_bool(f.value, "descendants", req.descendants)) return *e;
    }
  }
  return req;
}

std::variant<StreamInputEvent, DecodeError> decode_stream_input(std::string_view json) {
  dom::object o;
  if (auto e = parse_object(json, o)) return *e;
  StreamInputEvent ev;
  for (auto f : o) {
    if (f.value.is_null()) continue;
    StreamInputEvent::Kind kind = is(f.key, "start")       ? StreamInputEvent::Kind::start
                                  : is(f.key, "data")      ? StreamInputEvent::Kind::data
                                  : is(f.key, "keepalive") ? StreamInputEvent::Kind::keepalive
                                                           : StreamInputEvent::Kind::none;
    if (kind == StreamInputEvent::Kind::none) continue;
    if (ev.kind != StreamInputEvent::Kind::none) return DecodeError{"stream input: more than one event in a message"};
    ev.kind = kind;
    std::optional<dom::object> inner;
    if (auto e = read_object(f.value, f.key, inner)) return *e;
    if (!inner) continue;
    for (auto g : *inner) {
      Err e;
      if (kind == StreamInputEvent::Kind::start && is(g.key, "process")) e = read_selector(g.value, ev.process);
      if (kind == StreamInputEvent::Kind::data && is(g.key, "input")) e = read_input(g.value, ev.input);
      if (e) return *e;
    }
  }
  return ev;
}

std::optional<DecodeError> decode_empty(std::string_view json) {
  dom::object o;
  return parse_object(json, o);
}

// ---------------------------------------------------------------------------
// process responses

void append_start_event(std::string& out, uint32_t pid) {
  out += "{\"event\":{\"start\":{";
  if (pid) out += "\"pid\":" + std::to_string(pid);
  out += "}}}";
}

void append_data_event(std::string& out, DataStream s, const uint8_t* data, size_t len) {
  out += "{\"event\":{\"data\":{\"";
  out += s == DataStream::stdout_bytes ? "stdout" : s == DataStream::stderr_bytes ? "stderr" : "pty";
  out += "\":";
  append_bytes(out, data, len);
  out += "}}}";
}

void append_end_event(std::string& out, const EndEvent& end) {
  out += "{\"event\":{\"end\":{";
  Fields f{out};
  if (end.exit_code != 0) {
    f.name("exitCode");
    out += std::to_string(end.exit_code);
  }
  if (end.exited) {
    f.name("exited");
    out += "true";
  }
  if (!end.status.empty()) {
    f.name("status");
    str(out, end.status);
  }
  if (end.error) {
    f.name("error");
    str(out, *end.error);
  }
  out += "}}}";
}

void append_keepalive_event(std::string& out) { out += "{\"event\":{\"keepalive\":{}}}"; }

std::string list_response(const std::vector<ProcessInfo>& processes) {
  std::string out = "{\"processes\":[";
  for (size_t i = 0; i < processes.size(); ++i) {
    const ProcessInfo& p = processes[i];
    if (i) out += ',';
    out += "{\"config\":{";
    Fields c{out};
    c.name("cmd");
    str(out, p.config.cmd);
    if (!p.config.args.empty()) {
      c.name("args");
      out += '[';
      for (size_t a = 0; a < p.config.args.size(); ++a) {
        if (a) out += ',';
        str(out, p.config.args[a]);
      }
      out += ']';
    }
    if (!p.config.envs.empty()) {
      c.name("envs");
      out += '{';
      bool first = true;
      for (const auto& [k, v] : p.config.envs) {
        if (!first) out += ',';
        first = false;
        str(out, k);
        out += ':';
        str(out, v);
      }
      out += '}';
    }
    if (p.config.cwd) {
      c.name("cwd");
      str(out, *p.config.cwd);
    }
    out += '}';
    if (p.pid) out += ",\"pid\":" + std::to_string(p.pid);
    if (p.tag) {
      out += ",\"tag\":";
      str(out, *p.tag);
    }
    out += '}';
  }
  out += "]}";
  return out;
}

// ---------------------------------------------------------------------------
// filesystem

std::variant<PathRequest, DecodeError> decode_path_request(std::string_view json) {
  dom::object o;
  if (auto e = parse_object(json, o)) return *e;
  PathRequest req;
  for (auto f : o)
    if (is(f.key, "path"))
      if (auto e = read_string(f.value, "path", req.path)) return *e;
  return req;
}

std::variant<MoveRequest, DecodeError> decode_move(std::string_view json) {
  dom::object o;
  if (auto e = parse_object(json, o)) return *e;
  MoveRequest req;
  for (auto f : o) {
    Err e;
    if (is(f.key, "source")) e = read_string(f.value, "source", req.source);
    else if (is(f.key, "destination")) e = read_string(f.value, "destination", req.destination);
    if (e) return *e;
  }
  return req;
}

std::variant<ListDirRequest, DecodeError> decode_list_dir(std::string_view json) {
  dom::object o;
  if (auto e = parse_object(json, o)) return *e;
  ListDirRequest req;
  for (auto f : o) {
    Err e;
    if (is(f.key, "path")) e = read_string(f.value, "path", req.path);
    else if (is(f.key, "depth")) e = read_u32(f.value, "depth", req.depth);
    if (e) return *e;
  }
  return req;
}

std::variant<WatchRequest, DecodeError> decode_watch(std::string_view json) {
  dom::object o;
  if (auto e = parse_object(json, o)) return *e;
  WatchRequest req;
  for (auto f : o)
    if (auto e = read_watch_fields(f.key, f.value, req)) return *e;
  return req;
}

std::variant<WatcherIdRequest, DecodeError> decode_watcher_id(std::string_view json) {
  dom::object o;
  if (auto e = parse_object(json, o)) return *e;
  WatcherIdRequest req;
  for (auto f : o)
    if (is(f.key, "watcherId", "watcher_id"))
      if (auto e = read_string(f.value, "watcherId", req.watcher_id)) return *e;
  return req;
}

std::string_view file_type_name(FileType t) {
  switch (t) {
    case FileType::file:
      return "FILE_TYPE_FILE";
    case FileType::directory:
      return "FILE_TYPE_DIRECTORY";
    case FileType::symlink:
      return "FILE_TYPE_SYMLINK";
    case FileType::unspecified:
      break;
  }
  return "FILE_TYPE_UNSPECIFIED";
}

std::string_view event_type_name(EventType t) {
  switch (t) {
    case EventType::create:
      return "EVENT_TYPE_CREATE";
    case EventType::write:
      return "EVENT_TYPE_WRITE";
    case EventType::remove:
      return "EVENT_TYPE_REMOVE";
    case EventType::rename:
      return "EVENT_TYPE_RENAME";
    case EventType::chmod:
      return "EVENT_TYPE_CHMOD";
    case EventType::unspecified:
      break;
  }
  return "EVENT_TYPE_UNSPECIFIED";
}

void append_metadata(std::string& out, const std::map<std::string, std::string>& metadata) {
  out += '{';
  bool first = true;
  for (const auto& [k, v] : metadata) {
    if (!first) out += ',';
    first = false;
    str(out, k);
    out += ':';
    str(out, v);
  }
  out += '}';
}

void append_entry_info(std::string& out, const EntryInfo& e) {
  out += '{';
  Fields f{out};
  if (!e.name.empty()) {
    f.name("name");
    str(out, e.name);
  }
  if (e.type != FileType::unspecified) {
    f.name("type");
    out += '"';
    out += file_type_name(e.type);
    out += '"';
  }
  if (!e.path.empty()) {
    f.name("path");
    str(out, e.path);
  }
  if (e.size != 0) {
    f.name("size");
    out += '"' + std::to_string(e.size) + '"';
  }
  if (e.mode != 0) {
    f.name("mode");
    out += std::to_string(e.mode);
  }
  if (!e.permissions.empty()) {
    f.name("permissions");
    str(out, e.permissions);
  }
  if (!e.owner.empty()) {
    f.name("owner");
    str(out, e.owner);
  }
  if (!e.group.empty()) {
    f.name("group");
    str(out, e.group);
  }
  if (e.modified) {
    f.name("modifiedTime");
    out += '"' + timestamp_json(*e.modified) + '"';
  }
  if (e.symlink_target) {
    f.name("symlinkTarget");
    str(out, *e.symlink_target);
  }
  if (!e.metadata.empty()) {
    f.name("metadata");
    append_metadata(out, e.metadata);
  }
  if (e.is_symlink) {
    f.name("isSymlink");
    out += "true";
  }
  out += '}';
}

std::string entry_response(const EntryInfo& e) {
  std::string out = "{\"entry\":";
  append_entry_info(out, e);
  out += '}';
  return out;
}

std::string list_dir_response(const std::vector<EntryInfo>& entries) {
  std::string out = "{\"entries\":[";
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i) out += ',';
    append_entry_info(out, entries[i]);
  }
  out += "]}";
  return out;
}

void append_fs_event(std::string& out, const FsEvent& e) {
  out += '{';
  Fields f{out};
  if (!e.name.empty()) {
    f.name("name");
    str(out, e.name);
  }
  if (e.type != EventType::unspecified) {
    f.name("type");
    out += '"';
    out += event_type_name(e.type);
    out += '"';
  }
  if (e.entry) {
    f.name("entry");
    append_entry_info(out, *e.entry);
  }
  out += '}';
}

void append_watch_start(std::string& out) { out += "{\"start\":{}}"; }

void append_watch_event(std::string& out, const FsEvent& e) {
  out += "{\"filesystem\":";
  append_fs_event(out, e);
  out += '}';
}

void append_watch_keepalive(std::string& out) { out += "{\"keepalive\":{}}"; }

std::string create_watcher_response(std::string_view id) {
  std::string out = "{\"watcherId\":";
  str(out, id);
  out += '}';
  return out;
}

std::string watcher_events_response(const std::vector<FsEvent>& events) {
  std::string out = "{\"events\":[";
  for (size_t i = 0; i < events.size(); ++i) {
    if (i) out += ',';
    append_fs_event(out, events[i]);
  }
  out += "]}";
  return out;
}

// ---------------------------------------------------------------------------

std::string go_file_mode_string(mode_t m) {
  std::string out;
  // Go's type letters, in the order of its FileMode bits: d a l T L D p S u g c t ?
  if (S_ISDIR(m)) out += 'd';
  if (S_ISLNK(m)) out += 'L';
  if (S_ISBLK(m) || S_ISCHR(m)) out += 'D';
  if (S_ISFIFO(m)) out += 'p';
  if (S_ISSOCK(m)) out += 'S';
  if (m & S_ISUID) out += 'u';
  if (m & S_ISGID) out += 'g';
  if (S_ISCHR(m)) out += 'c';
  if (m & S_ISVTX) out += 't';
  if (out.empty()) out += '-';
  static const char rwx[] = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) out += (m & (1u << (8 - i))) ? rwx[i] : '-';
  return out;
}

std::string timestamp_json(const timespec& ts) {
  struct tm tm {};
  time_t secs = ts.tv_sec;
  gmtime_r(&secs, &tm);
  char buf[64];
  int n = snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                   tm.tm_hour, tm.tm_min, tm.tm_sec);
  std::string out(buf, static_cast<size_t>(n));
  long ns = ts.tv_nsec;
  if (ns > 0 && ns < 1000000000L) {
    // 3, 6 or 9 digits, as protojson writes them.
    if (ns % 1000000 == 0) n = snprintf(buf, sizeof buf, ".%03ld", ns / 1000000);
    else if (ns % 1000 == 0) n = snprintf(buf, sizeof buf, ".%06ld", ns / 1000);
    else n = snprintf(buf, sizeof buf, ".%09ld", ns);
    out.append(buf, static_cast<size_t>(n));
  }
  out += 'Z';
  return out;
}

std::optional<std::string> decode_proto_bytes(std::string_view text) {
  std::string std_text;
  std_text.reserve(text.size() + 3);
  for (char c : text) {
    if (c == '-') c = '+';
    else if (c == '_') c = '/';
    std_text += c;
  }
  while (!std_text.empty() && std_text.back() == '=') std_text.pop_back();
  if (std_text.size() % 4 == 1) return std::nullopt;
  while (std_text.size() % 4 != 0) std_text += '=';
  // The standard decoder skips CR and LF (Go's does); proto3 JSON has none.
  if (std_text.find_first_of("\r\n") != std::string::npos) return std::nullopt;
  return base64_decode(std_text);
}

}  // namespace execd::protocol::envd
