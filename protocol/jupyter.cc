// protocol/jupyter: see header.
#include "protocol/jupyter.h"
#include "protocol/track_request.h"

#include <openssl/crypto.h>
#include <simdjson.h>
#include <sys/time.h>

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

std::variant<WireMessage, WireError> decode(const std::vector<std::string>& frames, std::string_view key) {
  size_t delim = 0;
  while (delim < frames.size() && frames[delim] != kDelimiter) ++delim;
  if (delim == frames.size()) return WireError::no_delimiter;
  if (frames.size() - delim < 6) return WireError::truncated;
  WireMessage m;
  m.identities.assign(frames.begin(), frames.begin() + static_cast<std::ptrdiff_t>(delim));
  const std::string& signature = frames[delim + 1];
  m.header = frames[delim + 2];
  m.parent_header = frames[delim + 3];
  m.metadata = frames[delim + 4];
  m.content = frames[delim + 5];
  m.buffers.assign(frames.begin() + static_cast<std::ptrdiff_t>(delim + 6), frames.end());
  if (!key.empty()) {
    std::string expected = sign(key, m);
    if (expected.empty() || signature.size() != expected.size() ||
        CRYPTO_memcmp(signature.data(), expected.data(), expected.size()) != 0)
      return WireError::bad_signature;
  }
  return m;
}

std::optional<Envelope> read_envelope(const WireMessage& m) {
  Envelope e;
  simdjson::dom::object header, parent;
  if (parser().parse(m.header).get(header)) return std::nullopt;
  e.msg_type = sfield(header, "msg_type");
  e.msg_id = sfield(header, "msg_id");
  if (parser().parse(m.parent_header).get(parent)) return std::nullopt;
  e.parent_msg_id = sfield(parent, "msg_id");
  return e;
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

std::string execute_request_content(std::string_view code) {
  ojson c;
  c["code"] = code;
  c["silent"] = false;
  c["store_history"] = true;
  c["user_expressions"] = json::object();
  c["allow_stdin"] = false;
  c["stop_on_error"] = true;
  return c.dump(-1, ' ', false, kReplace);
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
