// protocol/jupyter: see header.
#include "protocol/jupyter.h"
#include "protocol/track_request.h"

#include <openssl/crypto.h>
#include <simdjson.h>
#include <sys/time.h>

#include <algorithm>
#include <ctime>
#include <nlohmann/json.hpp>

#include "protocol/json_text.h"
#include "protocol/sha.h"

namespace execd::protocol::jupyter {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

constexpr auto kReplace = json::error_handler_t::replace;

std::string iso_now() {
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  char buf[64];
  size_t n = strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf + n, sizeof buf - n, ".%06ldZ", static_cast<long>(tv.tv_usec));
  return buf;
}

// One parser per thread: its buffers are reused from message to message.
simdjson::dom::parser& parser() {
  thread_local simdjson::dom::parser p;
  return p;
}

std::string sfield(simdjson::dom::object obj, const char* key) {
  std::string_view v;
  return obj[key].get(v) ? std::string() : std::string(v);
}

}  // namespace

std::string sign(std::string_view key, const WireMessage& m) {
  if (key.empty()) return {};
  return lower_hex(hmac_sha256(key, {m.header, m.parent_header, m.metadata, m.content}));
}

namespace {
std::string sign_views(std::string_view key, const WireView& m) {
  if (key.empty()) return {};
  return lower_hex(hmac_sha256(key, {m.header, m.parent_header, m.metadata, m.content}));
}
}  // namespace

std::vector<std::string> encode(const WireMessage& m, std::string_view key) {
  std::vector<std::string> frames;
  frames.reserve(m.identities.size() + 6 + m.buffers.size());
  for (const auto& id : m.identities) frames.push_back(id);
  frames.emplace_back(kDelimiter);
  frames.push_back(sign(key, m));
  frames.push_back(m.header);
  frames.push_back(m.parent_header);
  frames.push_back(m.metadata);
  frames.push_back(m.content);
  for (const auto& b : m.buffers) frames.push_back(b);
  return frames;
}

const char* describe(WireError e) {
  switch (e) {
    case WireError::no_delimiter: return "no <IDS|MSG> delimiter";
    case WireError::truncated: return "fewer than the five frames after the delimiter";
    case WireError::bad_signature: return "signature does not match";
  }
  return "?";
}

std::variant<WireView, WireError> decode_view(const std::vector<std::string_view>& frames, std::string_view key) {
  size_t delim = 0;
  while (delim < frames.size() && frames[delim] != kDelimiter) ++delim;
  if (delim == frames.size()) return WireError::no_delimiter;
  if (frames.size() - delim < 6) return WireError::truncated;
  WireView m;
  m.identities.assign(frames.begin(), frames.begin() + static_cast<std::ptrdiff_t>(delim));
  std::string_view signature = frames[delim + 1];
  m.header = frames[delim + 2];
  m.parent_header = frames[delim + 3];
  m.metadata = frames[delim + 4];
  m.content = frames[delim + 5];
  m.buffers.assign(frames.begin() + static_cast<std::ptrdiff_t>(delim + 6), frames.end());
  if (!key.empty()) {
    std::string expected = sign_views(key, m);
    if (expected.empty() || signature.size() != expected.size() ||
        CRYPTO_memcmp(signature.data(), expected.data(), expected.size()) != 0)
      return WireError::bad_signature;
  }
  return m;
}

std::variant<WireMessage, WireError> decode(const std::vector<std::string>& frames, std::string_view key) {
  std::vector<std::string_view> views(frames.begin(), frames.end());
  auto decoded = decode_view(views, key);
  if (auto* err = std::get_if<WireError>(&decoded)) return *err;
  const WireView& v = std::get<WireView>(decoded);
  WireMessage m;
  m.identities.assign(v.identities.begin(), v.identities.end());
  m.header = v.header;
  m.parent_header = v.parent_header;
  m.metadata = v.metadata;
  m.content = v.content;
  m.buffers.assign(v.buffers.begin(), v.buffers.end());
  return m;
}

namespace {
std::optional<Envelope> envelope_of(std::string_view header_text, std::string_view parent_text) {
  Envelope e;
  simdjson::dom::object header, parent;
  if (parser().parse(header_text.data(), header_text.size()).get(header)) return std::nullopt;
  e.msg_type = sfield(header, "msg_type");
  e.msg_id = sfield(header, "msg_id");
  if (parser().parse(parent_text.data(), parent_text.size()).get(parent)) return std::nullopt;
  e.parent_msg_id = sfield(parent, "msg_id");
  return e;
}
}  // namespace

std::optional<Envelope> read_envelope(const WireMessage& m) { return envelope_of(m.header, m.parent_header); }
std::optional<Envelope> read_envelope(const WireView& m) { return envelope_of(m.header, m.parent_header); }

namespace {

size_t skip_ws(std::string_view s, size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  return i;
}

// At an opening quote: the index past the closing one (npos if unclosed).
size_t string_end(std::string_view s, size_t i) {
  for (++i; i < s.size(); ++i) {
    if (s[i] == '\\') ++i;
    else if (s[i] == '"') return i + 1;
  }
  return std::string_view::npos;
}

// Past one JSON value starting at `i` (npos if it runs off the end).
size_t value_end(std::string_view s, size_t i) {
  if (i >= s.size()) return std::string_view::npos;
  if (s[i] == '"') return string_end(s, i);
  if (s[i] != '{' && s[i] != '[') {
    while (i < s.size() && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' && s[i] != '\n' && s[i] != '\r' &&
           s[i] != '\t')
      ++i;
    return i;
  }
  int depth = 0;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c == '"') {
      i = string_end(s, i);
      if (i == std::string_view::npos) return i;
      --i;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

void put_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool hex4(std::string_view s, size_t at, uint32_t& v) {
  if (at + 4 > s.size()) return false;
  v = 0;
  for (size_t i = at; i < at + 4; ++i) {
    char c = s[i];
    uint32_t d = c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : 16;
    if (d > 15) return false;
    v = v * 16 + d;
  }
  return true;
}

}  // namespace

bool unescape_json_string(std::string_view s, size_t& pos, size_t max, std::string& out) {
  size_t added = 0;
  while (pos < s.size() && added < max) {
    size_t run = s.find('\\', pos);
    size_t end = run == std::string_view::npos ? s.size() : run;
    if (end > pos) {
      size_t take = std::min(end - pos, max - added);
      out.append(s.substr(pos, take));
      pos += take;
      added += take;
      continue;
    }
    // An escape at `pos`.
    if (pos + 1 >= s.size()) return false;
    char e = s[pos + 1];
    size_t before = out.size();
    switch (e) {
      case '"': out += '"'; pos += 2; break;
      case '\\': out += '\\'; pos += 2; break;
      case '/': out += '/'; pos += 2; break;
      case 'b': out += '\b'; pos += 2; break;
      case 'f': out += '\f'; pos += 2; break;
      case 'n': out += '\n'; pos += 2; break;
      case 'r': out += '\r'; pos += 2; break;
      case 't': out += '\t'; pos += 2; break;
      case 'u': {
        uint32_t cp;
        if (!hex4(s, pos + 2, cp)) return false;
        pos += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          uint32_t lo;
          if (pos + 1 < s.size() && s[pos] == '\\' && s[pos + 1] == 'u' && hex4(s, pos + 2, lo) && lo >= 0xDC00 &&
              lo <= 0xDFFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            pos += 6;
          } else {
            cp = 0xFFFD;  // a lone surrogate: what simdjson would refuse, shown as U+FFFD
          }
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          cp = 0xFFFD;
        }
        put_utf8(out, cp);
        break;
      }
      default:
        return false;
    }
    added += out.size() - before;
  }
  return true;
}

std::optional<StreamText> find_stream_text(std::string_view s) {
  size_t i = skip_ws(s, 0);
  if (i >= s.size() || s[i] != '{') return std::nullopt;
  i = skip_ws(s, i + 1);
  std::optional<std::string_view> name, text;
  while (i < s.size() && s[i] != '}') {
    if (s[i] != '"') return std::nullopt;
    size_t kend = string_end(s, i);
    if (kend == std::string_view::npos) return std::nullopt;
    std::string_view key = s.substr(i + 1, kend - i - 2);
    i = skip_ws(s, kend);
    if (i >= s.size() || s[i] != ':') return std::nullopt;
    i = skip_ws(s, i + 1);
    size_t vend = value_end(s, i);
    if (vend == std::string_view::npos) return std::nullopt;
    if ((key == "name" || key == "text") && s[i] == '"') (key == "name" ? name : text) = s.substr(i + 1, vend - i - 2);
    i = skip_ws(s, vend);
    if (i < s.size() && s[i] == ',') i = skip_ws(s, i + 1);
    else if (i >= s.size() || s[i] != '}') return std::nullopt;
  }
  if (i >= s.size() || !name || !text) return std::nullopt;
  return StreamText{*name == "stderr", *text};
}

std::optional<StreamContent> read_stream_content(std::string_view content) {
  simdjson::dom::object obj;
  if (parser().parse(content.data(), content.size()).get(obj)) return std::nullopt;
  auto name = obj["name"];
  std::string_view text;
  if (name.error() || obj["text"].get(text)) return std::nullopt;
  std::string_view n;
  StreamContent out;
  out.is_stderr = !name.get(n) && n == "stderr";
  out.text.assign(text);
  return out;
}

WireMessage make_request(std::string_view msg_type, std::string_view msg_id, std::string_view session,
                         std::string content) {
  ojson h;
  h["msg_id"] = msg_id;
  h["msg_type"] = msg_type;
  h["username"] = "execd";
  h["session"] = session;
  h["date"] = iso_now();
  h["version"] = kProtocolVersion;
  WireMessage m;
  m.header = h.dump(-1, ' ', false, kReplace);  // never throws, whatever the caller passes
  m.content = std::move(content);
  return m;
}

std::string execute_request_content(std::string_view code, bool silent) {
  ojson c;
  c["code"] = code;
  c["silent"] = silent;
  c["store_history"] = !silent;
  c["user_expressions"] = json::object();
  c["allow_stdin"] = false;
  c["stop_on_error"] = !silent;  // a failing helper must not abort the code queued after it
  return c.dump(-1, ' ', false, kReplace);
}

EnvScript python_env_script(const std::map<std::string, std::string>& vars) {
  // A JSON object of strings is a Python dict literal.
  ojson d = ojson::object();
  for (const auto& [k, v] : vars) d[k] = v;
  std::string literal = d.dump(-1, ' ', false, kReplace);  // raw UTF-8: an escaped pair is two surrogates to Python
  EnvScript s;
  s.apply =
      "def _execd_env_apply(new):\n"
      "    import os\n"
      "    saved = {k: os.environ.get(k) for k in new}\n"
      "    os.environ.update(new)\n"
      "    return saved\n"
      "_execd_env_saved = _execd_env_apply(" + literal + ")\n"
      "del _execd_env_apply\n";
  s.restore =
      "def _execd_env_restore(saved):\n"
      "    import os\n"
      "    for k, v in saved.items():\n"
      "        if v is None:\n"
      "            os.environ.pop(k, None)\n"
      "        else:\n"
      "            os.environ[k] = v\n"
      "_execd_env_restore(globals().pop('_execd_env_saved', {}))\n"
      "del _execd_env_restore\n";
  return s;
}

// ---------------------------------------------------------------------------

std::variant<RunCodeRequest, RequestError> decode_run_code(std::string_view body) {
  simdjson::dom::object j;
  if (parser().parse(std::string(body)).get(j)) return RequestError{"invalid JSON body"};
  RunCodeRequest r;
  std::string_view code;
  if (j["code"].get(code)) return RequestError{"code is required and must be a string"};
  r.code.assign(code);
  if (r.code.empty()) return RequestError{"code is required"};
  simdjson::dom::element ctx;
  if (!j["context"].get(ctx) && !ctx.is_null()) {
    simdjson::dom::object c;
    if (ctx.get(c)) return RequestError{"context must be an object"};
    for (auto [key, field] : {std::pair{"id", &r.context_id}, std::pair{"language", &r.language}}) {
      simdjson::dom::element v;
      if (c[key].get(v) || v.is_null()) continue;
      std::string_view sv;
      if (v.get(sv)) return RequestError{std::string("context.") + key + " must be a string"};
      field->assign(sv);
    }
  }
  simdjson::dom::element track;
  if (!j["track_changes"].get(track))
    if (const char* why = decode_track_changes(track, r.track_changes)) return RequestError{why};
  return r;
}

std::variant<CreateContextRequest, RequestError> decode_create_context(std::string_view body) {
  CreateContextRequest r;
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return r;
  simdjson::dom::object j;
  if (parser().parse(std::string(body)).get(j)) return RequestError{"invalid JSON body"};
  for (auto [key, field] : {std::pair{"language", &r.language}, std::pair{"cwd", &r.cwd}}) {
    simdjson::dom::element v;
    if (j[key].get(v) || v.is_null()) continue;
    std::string_view sv;
    if (v.get(sv)) return RequestError{std::string(key) + " must be a string"};
    field->assign(sv);
  }
  return r;
}

// ---------------------------------------------------------------------------

std::optional<KernelContent> read_content(std::string_view content) {
  simdjson::dom::object obj;
  if (parser().parse(content.data(), content.size()).get(obj)) return std::nullopt;
  KernelContent k;
  k.status = sfield(obj, "status");
  k.execution_state = sfield(obj, "execution_state");
  int64_t n = 0;
  if (!obj["execution_count"].get(n)) k.execution_count = n;
  k.ename = sfield(obj, "ename");
  k.evalue = sfield(obj, "evalue");
  simdjson::dom::array tb;
  if (!obj["traceback"].get(tb))
    for (simdjson::dom::element line : tb) {
      std::string_view t;
      if (!line.get(t)) k.traceback.emplace_back(t);
    }
  return k;
}

std::optional<std::string> result_event(std::string_view content, int64_t ts) {
  simdjson::dom::object obj, data;
  if (parser().parse(content.data(), content.size()).get(obj) || obj["data"].get(data)) return std::nullopt;
  // The bundle's values pass through as the kernel wrote them.
  std::string e = "{\"type\":\"result\",\"results\":{";
  bool first = true;
  for (auto field : data) {
    if (!first) e += ',';
    first = false;
    append_json_string_lossy(e, field.key == "text/plain" ? std::string_view("text") : field.key);
    e += ':';
    e += simdjson::minify(field.value);
  }
  e += "},\"timestamp\":";
  e += std::to_string(ts);
  simdjson::dom::object md;
  if (!obj["metadata"].get(md) && md.size() > 0) {
    e += ",\"metadata\":";
    e += simdjson::minify(md);
  }
  simdjson::dom::object transient;
  std::string_view display_id;
  if (!obj["transient"].get(transient) && !transient["display_id"].get(display_id)) {
    e += ",\"display_id\":";
    append_json_string_lossy(e, display_id);
  }
  e += '}';
  return e;
}

std::string execution_count_event(int64_t count, int64_t ts) {
  return "{\"type\":\"execution_count\",\"execution_count\":" + std::to_string(count) +
         ",\"timestamp\":" + std::to_string(ts) + "}";
}

std::string error_event(std::string_view ename, std::string_view evalue, const std::vector<std::string>& traceback,
                        int64_t ts) {
  ojson e;
  e["type"] = "error";
  e["error"] = {{"ename", ename}, {"evalue", evalue}, {"traceback", traceback}};
  e["timestamp"] = ts;
  return e.dump(-1, ' ', false, kReplace);
}

std::string error_event_from(const KernelContent& content, int64_t ts) {
  return error_event(content.ename, content.evalue, content.traceback, ts);
}


}  // namespace execd::protocol::jupyter
