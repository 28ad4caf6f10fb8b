// Unit tests for protocol/envelope and protocol/json_text: the compat line
// rules of the Go daemon, exact framing's byte-exact reconstruction across
// arbitrary read boundaries, and escaping that no line splitter can break.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "protocol/base64.h"
#include "protocol/envelope.h"
#include "protocol/json_text.h"

using namespace execd::protocol;

namespace {

std::vector<nlohmann::json> events(const std::string& out, const std::string& sep) {
  std::vector<nlohmann::json> v;
  size_t pos = 0;
  while (pos < out.size()) {
    size_t end = out.find(sep, pos);
    REQUIRE(end != std::string::npos);
    v.push_back(nlohmann::json::parse(out.substr(pos, end - pos)));
    pos = end + sep.size();
  }
  return v;
}

std::vector<std::string> compat_texts(const std::vector<std::string>& chunks) {
  EventEncoder enc(Framing::compat);
  std::string out;
  for (const auto& c : chunks)
    enc.output(out, OutputStream::out, reinterpret_cast<const uint8_t*>(c.data()), c.size(), 1);
  enc.flush(out, OutputStream::out, 1);
  std::vector<std::string> texts;
  for (auto& e : events(out, "\n\n")) texts.push_back(e["text"].get<std::string>());
  return texts;
}

std::string b64decode(const std::string& s) {
  static const std::string k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    if (c == '=') break;
    acc = (acc << 6) | static_cast<uint32_t>(k.find(c));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

// Feeds `data` in pieces cut at `cuts` and returns the reassembled stream and
// the events.
std::string exact_roundtrip(const std::string& data, const std::vector<size_t>& cuts,
                            std::vector<nlohmann::json>* evs = nullptr) {
  EventEncoder enc(Framing::exact);
  std::string out;
  size_t prev = 0;
  std::vector<size_t> all = cuts;
  all.push_back(data.size());
  for (size_t c : all) {
    enc.output(out, OutputStream::err, reinterpret_cast<const uint8_t*>(data.data()) + prev, c - prev, 7);
    prev = c;
  }
  enc.flush(out, OutputStream::err, 7);
  std::string rebuilt;
  auto ev = events(out, "\n");
  uint64_t expect_offset = 0;
  for (auto& e : ev) {
    CHECK(e["type"] == "stderr");
    CHECK(e["offset"].get<uint64_t>() == expect_offset);
    std::string piece = e.contains("text") ? e["text"].get<std::string>() : b64decode(e["b64"].get<std::string>());
    if (e.contains("text")) CHECK(utf8_valid(piece));
    expect_offset += piece.size();
    rebuilt += piece;
  }
  if (evs) *evs = ev;
  return rebuilt;
}

}  // namespace

TEST_CASE("compat: the Go daemon's line rules") {
  CHECK(compat_texts({"a\n\nb\n\n\nc\n"}) == std::vector<std::string>{"a", "\n", "b", "\n", "\n", "c"});
  CHECK(compat_texts({"p 10%\rp 20%\n"}) == std::vector<std::string>{"p 10%", "p 20%"});
  CHECK(compat_texts({"a\r\n"}) == std::vector<std::string>{"a"});
  CHECK(compat_texts({"\r\n"}) == std::vector<std::string>{"\n"});
  CHECK(compat_texts({"no newline"}) == std::vector<std::string>{"no newline"});
  // State survives read boundaries: the CR of a CRLF in one read, LF in the next.
  CHECK(compat_texts({"a\r", "\nb\r", "\n"}) == std::vector<std::string>{"a", "b"});
  CHECK(compat_texts({"par", "tial", " line\n"}) == std::vector<std::string>{"partial line"});
  CHECK(compat_texts({}).empty());
}

TEST_CASE("compat: invalid UTF-8 becomes U+FFFD and long lines are cut on a character boundary") {
  CHECK(compat_texts({"a\xff" "b\n"}) == std::vector<std::string>{"a\xEF\xBF\xBD" "b"});
  std::string line(EventEncoder::kMaxCompatLine - 1, 'x');
  line += "\xC3\xA9tail\n";  // é straddles the cut
  auto texts = compat_texts({line});
  REQUIRE(texts.size() == 2);
  CHECK(texts[0].size() == EventEncoder::kMaxCompatLine - 1);
  CHECK(texts[1] == "\xC3\xA9tail");
}

TEST_CASE("exact: every split of mixed text, CR, NUL, emoji and binary reproduces the bytes") {
  std::string data = "line\r\nbar 10%\rbar 20%\r\n\n| a | b |\n|---|---|\nNUL\0here\x01\x1b[31m";
  data.push_back('\0');
  data += "emoji \xF0\x9F\x98\x80 and \xE2\x80\xA8 sep \xC2\x85 next\xff\xfe\x80 bin";
  data += "no final newline";
  for (size_t i = 0; i <= data.size(); ++i) {
    CHECK(exact_roundtrip(data, {i}) == data);
    for (size_t j = i; j <= data.size(); j += 7) CHECK(exact_roundtrip(data, {i, j}) == data);
  }
  // One byte at a time.
  std::vector<size_t> cuts;
  for (size_t i = 1; i < data.size(); ++i) cuts.push_back(i);
  CHECK(exact_roundtrip(data, cuts) == data);
}

TEST_CASE("exact: a character split by a read is never split between events") {
  std::string emoji = "\xF0\x9F\x98\x80";
  std::vector<nlohmann::json> evs;
  CHECK(exact_roundtrip("ab" + emoji + "cd", {3}, &evs) == "ab" + emoji + "cd");
  for (auto& e : evs) REQUIRE(e.contains("text"));
  CHECK(evs.size() == 2);
  CHECK(evs[0]["text"] == "ab");
  CHECK(evs[1]["text"] == emoji + "cd");
}

TEST_CASE("exact: binary data becomes b64 without shattering into tiny events") {
  std::string bin;
  for (int i = 0; i < 4096; ++i) bin.push_back(static_cast<char>((i * 7919) & 0xFF));
  std::vector<nlohmann::json> evs;
  CHECK(exact_roundtrip(bin, {}, &evs) == bin);
  CHECK(evs.size() < 40);
}

TEST_CASE("json strings escape every control byte and the Unicode line separators") {
  std::string s;
  for (int c = 0; c < 0x20; ++c) s.push_back(static_cast<char>(c));
  s += "\"\\ \xC2\x85 \xE2\x80\xA8 \xE2\x80\xA9 \x7f ok";
  std::string out;
  append_json_string(out, s);
  for (char c : out) CHECK(static_cast<unsigned char>(c) >= 0x20);
  CHECK(out.find("\xC2\x85") == std::string::npos);
  CHECK(out.find("\xE2\x80\xA8") == std::string::npos);
  CHECK(out.find("\\u0085") != std::string::npos);
  CHECK(out.find("\\u2028") != std::string::npos);
  CHECK(out.find("\\u2029") != std::string::npos);
  CHECK(nlohmann::json::parse(out).get<std::string>() == s);
}

TEST_CASE("json strings: output that outgrows the room sized for few escapes is written whole") {
  // Every byte becomes six (\u0001) or two (\n): the writer sizes for few
  // escapes and must grow, mid-string, behind text already in `out`.
  for (const char* unit : {"\x01", "\n", "\xE2\x80\xA8", "a\x01"}) {
    std::string s;
    while (s.size() < 100000) s += unit;
    std::string out = "{\"k\":";
    append_json_string(out, s);
    out += "}";
    CHECK(nlohmann::json::parse(out)["k"].get<std::string>() == s);
  }
}

TEST_CASE("utf8 helpers") {
  auto u = [](const char* s) { return reinterpret_cast<const uint8_t*>(s); };
  CHECK(utf8_valid_prefix(u("abc\xC3\xA9"), 5) == 5);
  CHECK(utf8_valid_prefix(u("ab\xC0\x80"), 4) == 2);          // overlong
  CHECK(utf8_valid_prefix(u("ab\xED\xA0\x80"), 5) == 2);      // surrogate
  CHECK(utf8_valid_prefix(u("\xF4\x90\x80\x80"), 4) == 0);    // > U+10FFFF
  CHECK(utf8_incomplete_tail(u("ab\xF0\x9F"), 4) == 2);
  CHECK(utf8_incomplete_tail(u("ab\xE2"), 3) == 1);
  CHECK(utf8_incomplete_tail(u("ab\xC3\xA9"), 4) == 0);
  CHECK(utf8_incomplete_tail(u("ab\xFF"), 3) == 0);
  CHECK(utf8_incomplete_tail(u("\xE0\x80"), 2) == 0);         // can never become valid
  std::string b;
  append_base64(b, u("hello!?"), 7);
  CHECK(b == "aGVsbG8hPw==");
}

TEST_CASE("terminal events carry the structured result in both framings") {
  ExecutionResult r;
  r.exit_code = 3;
  r.stdout_bytes = 5;
  r.stdout_sha256 = "abc";
  std::string out;
  EventEncoder(Framing::compat).terminal(out, r, 42);
  auto e = nlohmann::json::parse(out.substr(0, out.size() - 2));
  CHECK(out.substr(out.size() - 2) == "\n\n");
  CHECK(e["type"] == "error");
  CHECK(e["error"]["evalue"] == "3");
  CHECK(e["error"]["traceback"][0] == "exit status 3");
  CHECK(e["exit_code"] == 3);
  CHECK(e["timestamp"] == 42);
  CHECK(e["stdout_bytes"] == 5);

  out.clear();
  r.exit_code.reset();
  r.signal = "SIGKILL";
  r.timed_out = true;
  EventEncoder(Framing::compat).terminal(out, r, 1);
  e = nlohmann::json::parse(out.substr(0, out.size() - 2));
  CHECK(e["error"]["evalue"] == "-1");
  CHECK(e["exit_code"].is_null());
  CHECK(e["signal"] == "SIGKILL");
  CHECK(e["timed_out"] == true);

  out.clear();
  EventEncoder(Framing::exact).terminal(out, r, 1);
  CHECK(out.back() == '\n');
  e = nlohmann::json::parse(out);
  CHECK(e["type"] == "execution_complete");
  CHECK(e["signal"] == "SIGKILL");

  out.clear();
  r = ExecutionResult{};
  r.exit_code = 0;
  EventEncoder(Framing::compat).terminal(out, r, 1);
  e = nlohmann::json::parse(out.substr(0, out.size() - 2));
  CHECK(e["type"] == "execution_complete");
  CHECK(e["exit_code"] == 0);
}

TEST_CASE("json strings: the word-at-a-time scan agrees with the byte rules at every alignment") {
  const std::vector<std::string> pieces = {"a", "Z", " ", "~", "\"", "\\", "\n", "\x01", "\x1f", "\x7f",
                                           "\xC3\xA9", "\xE2\x80\xA8", "\xC2\x85", "\xF0\x9F\x98\x80", "/"};
  uint32_t seed = 12345;
  auto next = [&] { return seed = seed * 1103515245u + 12345u; };
  for (int round = 0; round < 2000; ++round) {
    std::string s;
    size_t n = next() % 40;
    for (size_t k = 0; k < n; ++k) s += pieces[next() % pieces.size()];
    std::string out;
    append_json_string(out, s);
    for (char c : out) REQUIRE(static_cast<unsigned char>(c) >= 0x20);
    REQUIRE(out.find("\xE2\x80\xA8") == std::string::npos);
    REQUIRE(out.find("\xC2\x85") == std::string::npos);
    REQUIRE(nlohmann::json::parse(out).get<std::string>() == s);
  }
}
