// Unit tests for protocol/jupyter: the kernel wire framing and signing
// (a vector computed with Python's hmac, round trips with identities and
// buffers, tampered, truncated and delimiter-less messages rejected), the
// /code request bodies and the stream events built from kernel messages.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "protocol/jupyter.h"

using namespace execd::protocol::jupyter;
using json = nlohmann::json;

namespace {

WireMessage sample() {
  WireMessage m;
  m.header = R"({"msg_id":"a"})";
  m.content = R"({"code":"1+1"})";
  return m;
}

}  // namespace

TEST_CASE("jupyter: HMAC-SHA256 over header, parent, metadata, content") {
  // hmac.new(b"secret-key", header + parent + metadata + content, sha256).hexdigest()
  CHECK(sign("secret-key", sample()) == "712005a3ddfac00ddc4b5e88335391b3a6ee2873954746371defcd8f11725fad");
  CHECK(sign("", sample()).empty());
}

TEST_CASE("jupyter: encode then decode reproduces the message") {
  WireMessage m = sample();
  m.identities = {"id-1", std::string("\0\1bin", 5)};
  m.parent_header = R"({"msg_id":"p"})";
  m.metadata = R"({"k":1})";
  m.buffers = {"buf0", std::string(3, '\0')};
  auto frames = encode(m, "k3y");
  REQUIRE(frames.size() == 2 + 6 + 2);
  CHECK(frames[2] == kDelimiter);
  auto decoded = decode(frames, "k3y");
  REQUIRE(std::holds_alternative<WireMessage>(decoded));
  const auto& d = std::get<WireMessage>(decoded);
  CHECK(d.identities == m.identities);
  CHECK(d.header == m.header);
  CHECK(d.parent_header == m.parent_header);
  CHECK(d.metadata == m.metadata);
  CHECK(d.content == m.content);
  CHECK(d.buffers == m.buffers);
  auto env = read_envelope(d);
  REQUIRE(env);
  CHECK(env->msg_id == "a");
  CHECK(env->parent_msg_id == "p");
}

TEST_CASE("jupyter: a changed part or another key fails the signature") {
  auto frames = encode(sample(), "k3y");
  auto tampered = frames;
  tampered[5] = R"({"code":"2+2"})";  // content
  CHECK(std::get<WireError>(decode(tampered, "k3y")) == WireError::bad_signature);
  CHECK(std::get<WireError>(decode(frames, "other")) == WireError::bad_signature);
  auto short_sig = frames;
  short_sig[1].pop_back();
  CHECK(std::get<WireError>(decode(short_sig, "k3y")) == WireError::bad_signature);
  auto unsigned_msg = frames;
  unsigned_msg[1].clear();
  CHECK(std::get<WireError>(decode(unsigned_msg, "k3y")) == WireError::bad_signature);
  // Without a key nothing is checked (the protocol's "no signing").
  CHECK(std::holds_alternative<WireMessage>(decode(tampered, "")));
}

TEST_CASE("jupyter: truncated multipart and a missing delimiter are rejected") {
  auto frames = encode(sample(), "k3y");
  for (size_t keep = 0; keep < frames.size(); ++keep) {
    std::vector<std::string> cut(frames.begin(), frames.begin() + static_cast<std::ptrdiff_t>(keep));
    auto r = decode(cut, "k3y");
    REQUIRE(std::holds_alternative<WireError>(r));
    CHECK(std::get<WireError>(r) == (keep == 0 ? WireError::no_delimiter : WireError::truncated));
  }
  auto no_delim = frames;
  no_delim[0] = "<IDS|MSG >";
  CHECK(std::get<WireError>(decode(no_delim, "k3y")) == WireError::no_delimiter);
  // A frame that is not JSON passes framing but has no envelope.
  WireMessage bad = sample();
  bad.header = "not json";
  CHECK_FALSE(read_envelope(bad));
}

TEST_CASE("jupyter: requests carry a v5 header and allow_stdin false") {
  WireMessage m = make_request("execute_request", "mid", "sess", execute_request_content("print(1)"));
  json h = json::parse(m.header);
  CHECK(h["msg_type"] == "execute_request");
  CHECK(h["msg_id"] == "mid");
  CHECK(h["session"] == "sess");
  CHECK(h["version"] == "5.3");
  CHECK(h["date"].get<std::string>().size() >= 20);
  json c = json::parse(m.content);
  CHECK(c["code"] == "print(1)");
  CHECK(c["allow_stdin"] == false);
  CHECK(m.parent_header == "{}");
}

TEST_CASE("jupyter: /code request bodies") {
  auto r = decode_run_code(R"({"code":"1+1","context":{"id":"c1","language":"python"}})");
  REQUIRE(std::holds_alternative<RunCodeRequest>(r));
  CHECK(std::get<RunCodeRequest>(r).context_id == "c1");
  CHECK(std::get<RunCodeRequest>(r).language == "python");
  CHECK(std::holds_alternative<RequestError>(decode_run_code(R"({"context":{}})")));
  CHECK(std::holds_alternative<RequestError>(decode_run_code(R"({"code":""})")));
  CHECK(std::holds_alternative<RequestError>(decode_run_code(R"({"code":"x","context":{"id":5}})")));
  CHECK(std::holds_alternative<RequestError>(decode_run_code("{")));
  auto c = decode_create_context("");
  REQUIRE(std::holds_alternative<CreateContextRequest>(c));
  CHECK(std::get<CreateContextRequest>(decode_create_context(R"({"language":"bash","cwd":"/tmp"})")).cwd == "/tmp");
  CHECK(std::holds_alternative<RequestError>(decode_create_context(R"({"language":1})")));
}

TEST_CASE("jupyter: result events keep the whole MIME bundle, text/plain as text") {
  std::string png(70000, 'A');
  json content = {{"data", {{"text/plain", "<Figure>"}, {"image/png", png}, {"application/json", {{"a", 1.5}}}}},
                  {"metadata", json::object()},
                  {"transient", {{"display_id", "d1"}}}};
  auto e = result_event(content.dump(), 5);
  REQUIRE(e);
  json j = json::parse(*e);
  CHECK(j["type"] == "result");
  CHECK(j["results"]["text"] == "<Figure>");
  CHECK(j["results"]["image/png"].get<std::string>() == png);
  CHECK(j["results"]["application/json"]["a"] == 1.5);
  CHECK(j["display_id"] == "d1");
  CHECK_FALSE(j.contains("metadata"));  // empty: left out
  CHECK_FALSE(result_event(R"({"metadata":{}})", 5));
  CHECK_FALSE(result_event("not json", 5));
  auto c = read_content(R"({"ename":"ValueError","evalue":"x","traceback":["a","b"],"status":"error","execution_count":4})");
  REQUIRE(c);
  CHECK(c->status == "error");
  CHECK(c->execution_count == 4);
  json err = json::parse(error_event_from(*c, 7));
  CHECK(err["error"]["ename"] == "ValueError");
  CHECK(err["error"]["traceback"].size() == 2);
  auto idle = read_content(R"({"execution_state":"idle"})");
  REQUIRE(idle);
  CHECK(idle->execution_state == "idle");
  CHECK_FALSE(idle->execution_count);
  CHECK_FALSE(read_content("[1]"));
}

TEST_CASE("jupyter: stream content read with simdjson") {
  using namespace execd::protocol::jupyter;
  auto out = read_stream_content(R"({"name":"stdout","text":"hi\n\u00e9"})");
  REQUIRE(out);
  CHECK_FALSE(out->is_stderr);
  CHECK(out->text == "hi\n\xc3\xa9");
  auto err = read_stream_content(R"({"text":"warn","name":"stderr"})");
  REQUIRE(err);
  CHECK(err->is_stderr);
  CHECK(read_stream_content(R"({"name":"stdout"})") == std::nullopt);
  CHECK(read_stream_content(R"({"name":"stdout","text":3})") == std::nullopt);
  CHECK(read_stream_content(R"({"text":"no name"})") == std::nullopt);
  CHECK(read_stream_content("[1]") == std::nullopt);
  CHECK(read_stream_content("{\"name\":\"stdout\",\"text\":\"\xff\"}") == std::nullopt);  // not UTF-8
  CHECK(read_stream_content("") == std::nullopt);
}

TEST_CASE("jupyter: a large stream message read in place and unescaped in pieces") {
  std::string text;
  for (int i = 0; i < 3000; ++i) text += "line " + std::to_string(i) + R"(\t\"quoted\" \u00e9\n)";
  std::string content = R"({"name":"stderr","extra":{"a":[1,"}"]},"text":")" + text + R"("})";
  auto st = find_stream_text(content);
  REQUIRE(st);
  CHECK(st->is_stderr);
  auto whole = read_stream_content(content);
  REQUIRE(whole);
  std::string out;
  size_t pos = 0, pieces = 0;
  while (pos < st->escaped.size()) {
    REQUIRE(unescape_json_string(st->escaped, pos, 1000, out));
    ++pieces;
  }
  CHECK(pieces > 10);
  CHECK(out == whole->text);  // the same bytes as the whole-message parser
  // Surrogate pairs, and what is refused.
  std::string emoji;
  pos = 0;
  REQUIRE(unescape_json_string(R"(\ud83d\ude00)", pos, 100, emoji));
  CHECK(emoji == "\xf0\x9f\x98\x80");
  pos = 0;
  std::string bad;
  CHECK_FALSE(unescape_json_string(R"(ab\q)", pos, 100, bad));
  CHECK_FALSE(find_stream_text(R"({"name":"stdout"})"));
  CHECK_FALSE(find_stream_text(R"({"name":"stdout","text":"unclosed)"));
  CHECK_FALSE(find_stream_text("[]"));
}
