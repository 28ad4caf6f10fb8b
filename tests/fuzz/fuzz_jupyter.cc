// Fuzz target: the Jupyter wire protocol of protocol/jupyter. The input is
// NUL-separated: the HMAC key (empty: signing off, as a kernel may run),
// then the frames of one received message. Checks:
//  - decode() never crashes; what it accepts encodes back to the same frames
//    (the signature too, when there is a key) and decodes to the same message;
//  - with a key, a message signed under another key is refused;
//  - read_envelope(), the event builders fed the decoded content, and the
//    /code body decoders only ever produce well-formed JSON objects;
//  - read_stream_content (simdjson) agrees with nlohmann on `stream` content;
//  - any message execd builds from the input's bytes survives encode/decode.
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/jupyter.h"

namespace {

using namespace execd::protocol::jupyter;
using json = nlohmann::json;

void check_object(const std::string& text) {
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) std::abort();
}

bool same(const WireMessage& a, const WireMessage& b) {
  return a.identities == b.identities && a.header == b.header && a.parent_header == b.parent_header &&
         a.metadata == b.metadata && a.content == b.content && a.buffers == b.buffers;
}

void round_trip(const WireMessage& m, const std::string& key) {
  auto frames = encode(m, key);
  auto back = decode(frames, key);
  auto* got = std::get_if<WireMessage>(&back);
  // Identities equal to the delimiter cannot be told from it: the protocol
  // forbids them, and decode() splits at the first one.
  bool ambiguous = false;
  for (const auto& id : m.identities) ambiguous |= id == kDelimiter;
  if (ambiguous) return;
  if (!got || !same(*got, m)) std::abort();
  if (!key.empty()) {
    if (!std::holds_alternative<WireError>(decode(frames, key + "x"))) std::abort();
    if (std::get<WireError>(decode(frames, key + "x")) != WireError::bad_signature) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  size_t at = 0;
  while (true) {
    size_t nul = in.find('\0', at);
    parts.emplace_back(in.substr(at, nul == std::string_view::npos ? std::string_view::npos : nul - at));
    if (nul == std::string_view::npos) break;
    at = nul + 1;
  }
  std::string key = parts.front();
  std::vector<std::string> frames(parts.begin() + 1, parts.end());

  auto decoded = decode(frames, key);
  if (auto* m = std::get_if<WireMessage>(&decoded)) {
    auto again = encode(*m, key);
    if (again.size() != frames.size()) std::abort();
    size_t delim = m->identities.size();
    for (size_t i = 0; i < frames.size(); ++i)
      if (frames[i] != again[i] && !(key.empty() && i == delim + 1)) std::abort();
    round_trip(*m, key);
    if (auto env = read_envelope(*m)) {
      check_object("{\"t\":" + json(env->msg_type).dump(-1, ' ', false, json::error_handler_t::replace) + "}");
    }
    json content = json::parse(m->content, nullptr, false);
    // The fast stream reader agrees with the full parser (where keys cannot
    // repeat or hide behind escapes: there nlohmann keeps the last duplicate,
    // simdjson finds the first).
    if (auto stream = read_stream_content(m->content)) {
      if (!content.is_object() || !content.contains("name") || !content.contains("text")) std::abort();
      bool plain = m->content.find('\\') == std::string::npos &&
                   m->content.find("\"text\"") == m->content.rfind("\"text\"") &&
                   m->content.find("\"name\"") == m->content.rfind("\"name\"");
      if (plain && (content["text"] != stream->text || stream->is_stderr != (content["name"] == "stderr")))
        std::abort();
    }
    // The in-place reader of large prints agrees with the whole-message one
    // (on content without repeated keys, where the two may pick differently).
    if (auto st = find_stream_text(m->content)) {
      std::string text;
      size_t pos = 0;
      bool ok = true;
      while (ok && pos < st->escaped.size()) {
        size_t before = pos;
        ok = unescape_json_string(st->escaped, pos, 4096, text);
        if (ok && pos == before) std::abort();  // no progress
      }
      auto whole = read_stream_content(m->content);
      bool plain = m->content.find("\"text\"") == m->content.rfind("\"text\"") &&
                   m->content.find("\"name\"") == m->content.rfind("\"name\"") &&
                   m->content.find("\\ud8") == std::string::npos && m->content.find("\\udc") == std::string::npos;
      if (ok && whole && plain && whole->text != text) std::abort();
    }
    // The result builder passes bundle values through (simdjson): whatever
    // the kernel sent, what comes out is one JSON object.
    if (auto ev = result_event(m->content, 1)) check_object(*ev);
    if (auto c = read_content(m->content)) check_object(error_event_from(*c, 1));
  } else if (frames.size() >= 6 && key.empty()) {
    // Without a key only the framing can be wrong.
    if (std::get<WireError>(decoded) == WireError::bad_signature) std::abort();
  }

  // What execd sends: arbitrary bytes in every part still round-trip.
  WireMessage built = make_request(parts.size() > 1 ? parts[1] : "", "id", "session",
                                   execute_request_content(parts.size() > 2 ? parts[2] : in));
  check_object(built.header);
  check_object(built.content);
  if (parts.size() > 3) built.parent_header = parts[3];
  for (size_t i = 4; i < parts.size(); ++i) (i % 2 ? built.buffers : built.identities).push_back(parts[i]);
  round_trip(built, key);

  // The /code request bodies.
  auto run = decode_run_code(in);
  if (auto* r = std::get_if<RunCodeRequest>(&run); r && r->code.empty()) std::abort();
  (void)decode_create_context(in);
  return 0;
}
