// protocol/jupyter: see header.
#include "protocol/jupyter.h"

#include <openssl/crypto.h>
#include <simdjson.h>
#include <sys/time.h>

#include <ctime>
#include <nlohmann/json.hpp>

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

std::string string_field(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
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
  json header = json::parse(m.header, nullptr, false);
  json parent = json::parse(m.parent_header, nullptr, false);
  if (!header.is_object() || !parent.is_object()) return std::nullopt;
  return Envelope{string_field(header, "msg_type"), string_field(header, "msg_id"), string_field(parent, "msg_id")};
}

std::optional<StreamContent> read_stream_content(std::string_view content) {
  // One parser per thread: its buffers are reused from message to message.
  thread_local simdjson::dom::parser parser;
  simdjson::dom::object obj;
  if (parser.parse(content.data(), content.size()).get(obj)) return std::nullopt;
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
  json j = json::parse(body, nullptr, false);
  if (!j.is_object()) return RequestError{"invalid JSON body"};
  RunCodeRequest r;
  auto code = j.find("code");
  if (code == j.end() || !code->is_string()) return RequestError{"code is required and must be a string"};
  r.code = code->get<std::string>();
  if (r.code.empty()) return RequestError{"code is required"};
  if (auto ctx = j.find("context"); ctx != j.end() && !ctx->is_null()) {
    if (!ctx->is_object()) return RequestError{"context must be an object"};
    for (auto [key, field] : {std::pair{"id", &r.context_id}, std::pair{"language", &r.language}}) {
      auto it = ctx->find(key);
      if (it == ctx->end() || it->is_null()) continue;
      if (!it->is_string()) return RequestError{std::string("context.") + key + " must be a string"};
      *field = it->get<std::string>();
    }
  }
  return r;
}

std::variant<CreateContextRequest, RequestError> decode_create_context(std::string_view body) {
  CreateContextRequest r;
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return r;
  json j = json::parse(body, nullptr, false);
  if (!j.is_object()) return RequestError{"invalid JSON body"};
  for (auto [key, field] : {std::pair{"language", &r.language}, std::pair{"cwd", &r.cwd}}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_string()) return RequestError{std::string(key) + " must be a string"};
    *field = it->get<std::string>();
  }
  return r;
}

// ---------------------------------------------------------------------------

std::optional<std::string> result_event(const json& content, int64_t ts) {
  auto data = content.find("data");
  if (data == content.end() || !data->is_object()) return std::nullopt;
  ojson results = ojson::object();
  for (auto it = data->begin(); it != data->end(); ++it)
    results[it.key() == "text/plain" ? std::string("text") : it.key()] = it.value();
  ojson e;
  e["type"] = "result";
  e["results"] = std::move(results);
  e["timestamp"] = ts;
  if (auto md = content.find("metadata"); md != content.end() && md->is_object() && !md->empty())
    e["metadata"] = *md;
  if (auto t = content.find("transient"); t != content.end() && t->is_object()) {
    if (auto id = t->find("display_id"); id != t->end() && id->is_string()) e["display_id"] = *id;
  }
  return e.dump(-1, ' ', false, kReplace);
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

std::string error_event_from(const json& content, int64_t ts) {
  std::vector<std::string> tb;
  if (auto it = content.find("traceback"); it != content.end() && it->is_array())
    for (const auto& line : *it)
      if (line.is_string()) tb.push_back(line.get<std::string>());
  return error_event(string_field(content, "ename"), string_field(content, "evalue"), tb, ts);
}

std::string complete_event(const CodeOutcome& o, int64_t ts) {
  ojson e;
  e["type"] = "execution_complete";
  e["execution_time"] = o.execution_time_ms;
  e["timestamp"] = ts;
  e["status"] = o.status;
  if (o.execution_count) e["execution_count"] = *o.execution_count;
  return e.dump(-1, ' ', false, kReplace);
}

}  // namespace execd::protocol::jupyter
