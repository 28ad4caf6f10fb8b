// protocol/e2b_code: see header.
#include "protocol/e2b_code.h"

#include <simdjson.h>

#include "protocol/json_text.h"

namespace execd::protocol::e2b_code {

namespace dom = simdjson::dom;

namespace {

dom::parser& shared_parser() {
  thread_local dom::parser parser;
  return parser;
}

std::optional<DecodeError> optional_string(dom::element v, std::string_view field, std::optional<std::string>& out) {
  if (v.is_null()) return std::nullopt;
  std::string_view s;
  if (v.get(s)) return DecodeError{"field '" + std::string(field) + "' must be a string"};
  out = std::string(s);
  return std::nullopt;
}

// The MIME bundle keys E2B names; the rest go under "extra".
std::string_view e2b_name(std::string_view mime) {
  static constexpr std::pair<std::string_view, std::string_view> kNames[] = {
      {"text", "text"},                     // execd stores text/plain as "text"
      {"text/plain", "text"},
      {"text/html", "html"},
      {"text/markdown", "markdown"},
      {"image/svg+xml", "svg"},
      {"image/png", "png"},
      {"image/jpeg", "jpeg"},
      {"application/pdf", "pdf"},
      {"text/latex", "latex"},
      {"application/json", "json"},
      {"application/javascript", "javascript"},
      {"e2b/data", "data"},
      {"e2b/chart", "chart"},
  };
  for (const auto& [m, n] : kNames)
    if (m == mime) return n;
  return {};
}

void str(std::string& out, std::string_view s) { append_json_string_lossy(out, s); }

}  // namespace

std::variant<ExecuteRequest, DecodeError> decode_execute(std::string_view body) {
  dom::object o;
  dom::element root;
  if (shared_parser().parse(body.data(), body.size()).get(root) || root.get(o))
    return DecodeError{"the body must be a JSON object"};
  ExecuteRequest req;
  bool have_code = false;
  for (auto f : o) {
    if (f.key == "code") {
      std::string_view s;
      if (f.value.get(s)) return DecodeError{"field 'code' must be a string"};
      req.code.assign(s);
      have_code = true;
    } else if (f.key == "context_id") {
      if (auto e = optional_string(f.value, f.key, req.context_id)) return *e;
    } else if (f.key == "language") {
      if (auto e = optional_string(f.value, f.key, req.language)) return *e;
    } else if (f.key == "env_vars") {
      if (f.value.is_null()) continue;
      dom::object m;
      if (f.value.get(m)) return DecodeError{"field 'env_vars' must be an object of strings"};
      for (auto kv : m) {
        std::string_view v;
        if (kv.value.get(v)) return DecodeError{"field 'env_vars' must be an object of strings"};
        req.env_vars[std::string(kv.key)] = std::string(v);
      }
    }
  }
  if (!have_code) return DecodeError{"field 'code' is required"};
  return req;
}

std::variant<CreateContextRequest, DecodeError> decode_create_context(std::string_view body) {
  CreateContextRequest req;
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return req;
  dom::object o;
  dom::element root;
  if (shared_parser().parse(body.data(), body.size()).get(root) || root.get(o))
    return DecodeError{"the body must be a JSON object"};
  for (auto f : o) {
    if (f.key == "language") {
      if (auto e = optional_string(f.value, f.key, req.language)) return *e;
    } else if (f.key == "cwd") {
      if (auto e = optional_string(f.value, f.key, req.cwd)) return *e;
    }
  }
  return req;
}

std::string normalize_language(std::string_view language) {
  while (!language.empty() && (language.front() == ' ' || language.front() == '\t')) language.remove_prefix(1);
  while (!language.empty() && (language.back() == ' ' || language.back() == '\t')) language.remove_suffix(1);
  std::string l;
  for (char c : language) l += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  if (l.empty()) return "python";
  if (l == "js") return "javascript";
  if (l == "ts") return "typescript";
  return l;
}

void append_stream_line(std::string& out, bool is_stderr, std::string_view text, int64_t ts_ns) {
  out += is_stderr ? "{\"type\":\"stderr\",\"text\":" : "{\"type\":\"stdout\",\"text\":";
  str(out, text);
  out += ",\"timestamp\":" + std::to_string(ts_ns) + "}\n";
}

void append_error_line(std::string& out, std::string_view name, std::string_view value, std::string_view traceback) {
  out += "{\"type\":\"error\",\"name\":";
  str(out, name);
  out += ",\"value\":";
  str(out, value);
  out += ",\"traceback\":";
  str(out, traceback);
  out += "}\n";
}

void append_keepalive_line(std::string& out) { out += "{\"type\":\"keepalive\"}\n"; }
void append_end_line(std::string& out) { out += "{\"type\":\"end_of_execution\"}\n"; }

void translate_event(std::string& out, std::string_view event_json, bool& main_pending) {
  dom::object o;
  dom::element root;
  if (shared_parser().parse(event_json.data(), event_json.size()).get(root) || root.get(o)) return;
  std::string_view type;
  if (o["type"].get(type)) return;
  if (type == "execution_count") {
    int64_t n;
    if (o["execution_count"].get(n)) return;
    out += "{\"type\":\"number_of_executions\",\"execution_count\":" + std::to_string(n) + "}\n";
    main_pending = true;
    return;
  }
  if (type == "error") {
    dom::object e;
    if (o["error"].get(e)) return;
    std::string_view name, value;
    if (e["ename"].get(name)) name = {};
    if (e["evalue"].get(value)) value = {};
    std::string traceback;
    dom::array tb;
    if (!e["traceback"].get(tb))
      for (auto line : tb) {
        std::string_view s;
        if (!line.get(s)) traceback.append(s);
      }
    append_error_line(out, name, value, traceback);
    return;
  }
  if (type != "result") return;
  dom::object results;
  if (o["results"].get(results)) return;
  out += "{\"type\":\"result\"";
  std::string extra;
  for (auto f : results) {
    std::string_view name = e2b_name(f.key);
    if (name.empty()) {
      extra += extra.empty() ? "" : ",";
      str(extra, f.key);
      extra += ':';
      extra += simdjson::minify(f.value);
      continue;
    }
    out += ",\"";
    out += name;
    out += "\":";
    std::string_view text;
    if (name == "text" && !f.value.get(text) && text.size() >= 2 &&
        ((text.front() == '\'' && text.back() == '\'') || (text.front() == '"' && text.back() == '"'))) {
      // The server strips one pair of quotes from a repr'd string.
      str(out, text.substr(1, text.size() - 2));
    } else {
      out += simdjson::minify(f.value);
    }
  }
  if (!extra.empty()) out += ",\"extra\":{" + extra + "}";
  out += main_pending ? ",\"is_main_result\":true}\n" : ",\"is_main_result\":false}\n";
  main_pending = false;
}

std::string context_json(std::string_view id, std::string_view language, std::string_view cwd) {
  std::string out = "{\"id\":";
  str(out, id);
  out += ",\"language\":";
  str(out, language);
  out += ",\"cwd\":";
  str(out, cwd);
  out += '}';
  return out;
}

}  // namespace execd::protocol::e2b_code
