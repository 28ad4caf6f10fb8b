// Unit tests for protocol/websocket (handshake, client-frame parser, server-frame
// encoders) and protocol/base64.
#include <doctest/doctest.h>

#include <cctype>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "protocol/base64.h"
#include "protocol/websocket.h"

using namespace execd::protocol;

namespace {

const uint8_t kMask[4] = {0x37, 0xfa, 0x21, 0x3d};

std::string masked(WsOpcode opcode, std::string_view payload, bool fin = true) {
  return encode_masked_frame(opcode, payload, kMask, fin);
}

std::string with_raw_length(uint8_t b0, uint64_t length, std::string_view payload) {
  // A masked client frame with an explicit 64-bit length field.
  std::string frame;
  frame.push_back(static_cast<char>(b0));
  frame.push_back(static_cast<char>(0x80 | 127));
  for (int i = 0; i < 8; ++i) frame.push_back(static_cast<char>(length >> (56 - 8 * i)));
  frame.append(reinterpret_cast<const char*>(kMask), 4);
  for (size_t i = 0; i < payload.size(); ++i) {
    frame.push_back(static_cast<char>(static_cast<uint8_t>(payload[i]) ^ kMask[i & 3]));
  }
  return frame;
}

std::vector<WsEvent> drain(WsFrameParser& parser) {
  std::vector<WsEvent> events;
  WsEvent event;
  while (parser.next_event(event)) events.push_back(std::move(event));
  return events;
}

std::vector<WsEvent> parse_all(std::string_view stream, WsParserLimits limits = {}) {
  WsFrameParser parser(limits);
  parser.feed(stream);
  return drain(parser);
}

bool same_events(const std::vector<WsEvent>& a, const std::vector<WsEvent>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].kind != b[i].kind || a[i].code != b[i].code || a[i].payload != b[i].payload) return false;
  }
  return true;
}

// Expects exactly one error event (possibly after other events) with `code`.
void check_error(std::string_view stream, uint16_t code, WsParserLimits limits = {}) {
  const std::vector<WsEvent> events = parse_all(stream, limits);
  REQUIRE_FALSE(events.empty());
  CHECK(events.back().kind == WsEvent::Kind::error);
  CHECK(events.back().code == code);
}

std::string binary_payload(size_t size) {
  std::string payload(size, '\0');
  for (size_t i = 0; i < size; ++i) payload[i] = static_cast<char>((i * 131 + 7) & 0xFF);
  return payload;
}

HeaderLookup headers_from(std::map<std::string, std::string> headers) {
  // Case-insensitive lookup: the test table stores lower-case names.
  return [headers = std::move(headers)](std::string_view name) -> std::optional<std::string_view> {
    std::string lower(name);
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    const auto it = headers.find(lower);
    if (it == headers.end()) return std::nullopt;
    return std::string_view(it->second);
  };
}

std::map<std::string, std::string> good_headers() {
  return {{"upgrade", "websocket"},
          {"connection", "Upgrade"},
          {"sec-websocket-version", "13"},
          {"sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="}};
}

}  // namespace

TEST_CASE("base64: RFC 4648 vectors and round trips") {
  const std::pair<std::string, std::string> vectors[] = {
      {"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},         {"foo", "Zm9v"},
      {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"},
  };
  for (const auto& [plain, encoded] : vectors) {
    CHECK(base64_encode(plain) == encoded);
    const auto decoded = base64_decode(encoded);
    REQUIRE(decoded);
    CHECK(*decoded == plain);
  }
  for (size_t len = 0; len < 300; ++len) {
    const std::string data = binary_payload(len);
    const auto decoded = base64_decode(base64_encode(data));
    REQUIRE(decoded);
    CHECK(*decoded == data);
  }
  CHECK(base64_encode("\xff\xfe\xfd") == "//79");
}

TEST_CASE("base64: malformed input is rejected") {
  CHECK_FALSE(base64_decode("Zg"));       // missing padding
  CHECK_FALSE(base64_decode("Zg="));      // short padding
  CHECK_FALSE(base64_decode("Z==="));     // too much padding
  CHECK_FALSE(base64_decode("Zg==="));    // padding overrun
  CHECK_FALSE(base64_decode("Zg==Zg=="));  // data after padding
  CHECK_FALSE(base64_decode("Zm9v!"));    // outside the alphabet
  CHECK_FALSE(base64_decode("Zm 9v"));    // spaces are not skipped
  CHECK_FALSE(base64_decode("Zm9v_-=="));  // URL alphabet
  CHECK_FALSE(base64_decode("="));
  const auto with_newlines = base64_decode("Zm9v\r\nYmFy\n");
  REQUIRE(with_newlines);
  CHECK(*with_newlines == "foobar");
}

TEST_CASE("utf8 validator") {
  CHECK(is_valid_utf8(""));
  CHECK(is_valid_utf8("plain ascii"));
  CHECK(is_valid_utf8("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));  // é € 😀
  CHECK(is_valid_utf8("\xf4\x8f\xbf\xbf"));                      // U+10FFFF
  CHECK(is_valid_utf8("\xed\x9f\xbf"));                          // U+D7FF
  CHECK_FALSE(is_valid_utf8("\xc0\x80"));                        // overlong NUL
  CHECK_FALSE(is_valid_utf8("\xc1\xbf"));
  CHECK_FALSE(is_valid_utf8("\xe0\x80\x80"));       // overlong 3-byte
  CHECK_FALSE(is_valid_utf8("\xf0\x80\x80\x80"));   // overlong 4-byte
  CHECK_FALSE(is_valid_utf8("\xed\xa0\x80"));       // surrogate
  CHECK_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));   // > U+10FFFF
  CHECK_FALSE(is_valid_utf8("\xf5\x80\x80\x80"));
  CHECK_FALSE(is_valid_utf8("\x80"));               // stray continuation
  CHECK_FALSE(is_valid_utf8("\xe2\x82"));           // truncated
  CHECK_FALSE(is_valid_utf8("\xe2\x28\xa1"));       // bad continuation

  Utf8Validator incremental;
  const uint8_t part1[] = {'a', 0xe2, 0x82};
  const uint8_t part2[] = {0xac, 'b'};
  CHECK(incremental.feed(part1, sizeof part1));
  CHECK_FALSE(incremental.at_boundary());
  CHECK(incremental.feed(part2, sizeof part2));
  CHECK(incremental.at_boundary());
}

TEST_CASE("handshake: RFC 6455 accept key") {
  CHECK(websocket_accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

TEST_CASE("handshake: accepted upgrade produces the 101 response") {
  const HandshakeResult result = check_websocket_upgrade("GET", headers_from(good_headers()));
  CHECK(result.accepted);
  CHECK(result.status == 101);
  CHECK(result.error.empty());
  CHECK(result.response ==
        "HTTP/1.1 101 Switching Protocols\r\n"
        "Upgrade: websocket\r\n"
        "Connection: Upgrade\r\n"
        "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n");

  auto headers = good_headers();
  headers["connection"] = "keep-alive, UPGRADE";
  headers["upgrade"] = "WebSocket";
  headers["sec-websocket-version"] = " 13 ";
  CHECK(check_websocket_upgrade("GET", headers_from(headers)).accepted);
  CHECK(is_websocket_upgrade(headers_from(headers)));
}

TEST_CASE("handshake: refusals") {
  SUBCASE("missing Connection upgrade token") {
    auto headers = good_headers();
    headers["connection"] = "keep-alive, upgraded";
    const auto result = check_websocket_upgrade("GET", headers_from(headers));
    CHECK_FALSE(result.accepted);
    CHECK(result.status == 400);
    CHECK(result.response.rfind("HTTP/1.1 400 Bad Request\r\n", 0) == 0);
    CHECK(result.response.find("\r\n\r\nBad Request\n") != std::string::npos);
    CHECK_FALSE(is_websocket_upgrade(headers_from(headers)));
  }
  SUBCASE("no Connection header at all") {
    auto headers = good_headers();
    headers.erase("connection");
    CHECK(check_websocket_upgrade("GET", headers_from(headers)).status == 400);
  }
  SUBCASE("Upgrade is not websocket") {
    auto headers = good_headers();
    headers["upgrade"] = "h2c";
    CHECK(check_websocket_upgrade("GET", headers_from(headers)).status == 400);
  }
  SUBCASE("method is not GET") {
    const auto result = check_websocket_upgrade("POST", headers_from(good_headers()));
    CHECK(result.status == 405);
  }
  SUBCASE("wrong version answers 426 with the supported version") {
    auto headers = good_headers();
    headers["sec-websocket-version"] = "8";
    const auto result = check_websocket_upgrade("GET", headers_from(headers));
    CHECK(result.status == 426);
    CHECK(result.response.rfind("HTTP/1.1 426 Upgrade Required\r\n", 0) == 0);
    CHECK(result.response.find("\r\nSec-WebSocket-Version: 13\r\n") != std::string::npos);
    headers.erase("sec-websocket-version");
    CHECK(check_websocket_upgrade("GET", headers_from(headers)).status == 426);
  }
  SUBCASE("bad keys") {
    for (const char* key : {"", "dGhlIHNhbXBsZSBub25jZQ", "dGhlIHNhbXBsZSBub25j", "!!!!", "AAAAAAAAAAAAAAAAAAAAAAAAAAA="}) {
      auto headers = good_headers();
      headers["sec-websocket-key"] = key;
      CHECK(check_websocket_upgrade("GET", headers_from(headers)).status == 400);
    }
    auto headers = good_headers();
    headers.erase("sec-websocket-key");
    CHECK(check_websocket_upgrade("GET", headers_from(headers)).status == 400);
  }
}

TEST_CASE("parser: identical events at every split point and byte by byte") {
  const std::string big = binary_payload(70000);
  std::string stream;
  stream += masked(WsOpcode::text, "Hello");
  // "Hello wörld" in three fragments, the 2-byte 'ö' split across fragments 2 and 3,
  // with a ping between fragments 1 and 2.
  stream += masked(WsOpcode::text, "Hel", false);
  stream += masked(WsOpcode::ping, "p1");
  stream += masked(WsOpcode::continuation, "lo w\xc3", false);
  stream += masked(WsOpcode::continuation, "\xb6rld", true);
  const size_t big_header_at = stream.size();
  stream += masked(WsOpcode::binary, big);
  stream += masked(WsOpcode::pong, "");
  stream += masked(WsOpcode::close, std::string("\x03\xe8", 2) + "bye");
  CHECK(static_cast<uint8_t>(stream[big_header_at + 1]) == (0x80 | 127));  // 64-bit length form

  const std::vector<WsEvent> expected = {
      {WsEvent::Kind::text, "Hello", 0},
      {WsEvent::Kind::ping, "p1", 0},
      {WsEvent::Kind::text, "Hello w\xc3\xb6rld", 0},
      {WsEvent::Kind::binary, big, 0},
      {WsEvent::Kind::pong, "", 0},
      {WsEvent::Kind::close, "bye", 1000},
  };
  REQUIRE(same_events(parse_all(stream), expected));

  bool all_splits_match = true;
  size_t first_bad_split = 0;
  for (size_t split = 0; split <= stream.size(); ++split) {
    WsFrameParser parser;
    parser.feed(std::string_view(stream).substr(0, split));
    std::vector<WsEvent> events = drain(parser);
    parser.feed(std::string_view(stream).substr(split));
    for (WsEvent& event : drain(parser)) events.push_back(std::move(event));
    if (!same_events(events, expected)) {
      all_splits_match = false;
      first_bad_split = split;
      break;
    }
  }
  CHECK_MESSAGE(all_splits_match, "first mismatching split: " << first_bad_split);

  WsFrameParser byte_parser;
  std::vector<WsEvent> events;
  for (const char ch : stream) {
    byte_parser.feed(std::string_view(&ch, 1));
    for (WsEvent& event : drain(byte_parser)) events.push_back(std::move(event));
  }
  CHECK(same_events(events, expected));
  CHECK(byte_parser.finished());
}

TEST_CASE("parser: input after close or error is ignored") {
  WsFrameParser parser;
  parser.feed(masked(WsOpcode::close, "") + masked(WsOpcode::text, "late"));
  const auto events = drain(parser);
  REQUIRE(events.size() == 1);
  CHECK(events[0].kind == WsEvent::Kind::close);
  CHECK(events[0].code == ws_close::no_status);
  parser.feed(masked(WsOpcode::text, "later"));
  CHECK_FALSE(parser.has_events());
}

TEST_CASE("parser: empty messages and 16-bit lengths") {
  const std::string medium = binary_payload(300);
  const auto events = parse_all(masked(WsOpcode::text, "") + masked(WsOpcode::binary, medium) +
                                masked(WsOpcode::binary, "", false) + masked(WsOpcode::continuation, "x"));
  REQUIRE(events.size() == 3);
  CHECK(events[0].kind == WsEvent::Kind::text);
  CHECK(events[0].payload.empty());
  CHECK(events[1].payload == medium);
  CHECK(events[2].kind == WsEvent::Kind::binary);
  CHECK(events[2].payload == "x");
}

TEST_CASE("parser: protocol errors close with 1002") {
  SUBCASE("unmasked frame") {
    check_error(std::string("\x81\x02hi", 4), ws_close::protocol_error);
  }
  SUBCASE("reserved bits") {
    for (const uint8_t rsv : std::initializer_list<uint8_t>{1, 2, 4}) {
      check_error(encode_masked_frame(WsOpcode::text, "hi", kMask, true, rsv), ws_close::protocol_error);
    }
  }
  SUBCASE("unknown opcodes") {
    for (const uint8_t opcode : std::initializer_list<uint8_t>{3, 7, 0xB, 0xF}) {
      check_error(encode_masked_frame(static_cast<WsOpcode>(opcode), "x", kMask), ws_close::protocol_error);
    }
  }
  SUBCASE("control frame longer than 125 bytes") {
    check_error(masked(WsOpcode::ping, std::string(126, 'a')), ws_close::protocol_error);
    check_error(masked(WsOpcode::close, std::string("\x03\xe8", 2) + std::string(124, 'a')),
                ws_close::protocol_error);
  }
  SUBCASE("fragmented control frame") {
    check_error(masked(WsOpcode::ping, "x", false), ws_close::protocol_error);
  }
  SUBCASE("continuation without a start") {
    check_error(masked(WsOpcode::continuation, "x"), ws_close::protocol_error);
    check_error(masked(WsOpcode::text, "done") + masked(WsOpcode::continuation, "x"),
                ws_close::protocol_error);
  }
  SUBCASE("new data frame during fragmentation") {
    check_error(masked(WsOpcode::text, "a", false) + masked(WsOpcode::text, "b"), ws_close::protocol_error);
    check_error(masked(WsOpcode::binary, "a", false) + masked(WsOpcode::binary, "b"),
                ws_close::protocol_error);
  }
  SUBCASE("64-bit length with the most significant bit set") {
    check_error(with_raw_length(0x82, uint64_t{1} << 63, ""), ws_close::protocol_error);
  }
  SUBCASE("close payloads") {
    check_error(masked(WsOpcode::close, "\x03"), ws_close::protocol_error);
    for (const uint16_t code : std::initializer_list<uint16_t>{0, 999, 1004, 1005, 1006, 1015, 1016, 2000, 2999, 5000, 65535}) {
      std::string payload;
      payload.push_back(static_cast<char>(code >> 8));
      payload.push_back(static_cast<char>(code & 0xFF));
      INFO("code " << code);
      check_error(masked(WsOpcode::close, payload), ws_close::protocol_error);
    }
    check_error(masked(WsOpcode::close, std::string("\x03\xe8", 2) + "\xc3"), ws_close::protocol_error);
    check_error(masked(WsOpcode::close, std::string("\x03\xe8", 2) + "\xff"), ws_close::protocol_error);
  }
}

TEST_CASE("parser: valid close codes") {
  for (const uint16_t code : std::initializer_list<uint16_t>{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 4001, 4999}) {
    std::string payload;
    payload.push_back(static_cast<char>(code >> 8));
    payload.push_back(static_cast<char>(code & 0xFF));
    payload += "r\xc3\xa9";
    const auto events = parse_all(masked(WsOpcode::close, payload));
    REQUIRE(events.size() == 1);
    CHECK(events[0].kind == WsEvent::Kind::close);
    CHECK(events[0].code == code);
    CHECK(events[0].payload == "r\xc3\xa9");
  }
}

TEST_CASE("parser: invalid UTF-8 in text closes with 1007") {
  check_error(masked(WsOpcode::text, "ab\xff"), ws_close::invalid_payload);
  check_error(masked(WsOpcode::text, "\xed\xa0\x80"), ws_close::invalid_payload);
  // Incomplete sequence at the very end of the message.
  check_error(masked(WsOpcode::text, "ab\xe2\x82"), ws_close::invalid_payload);
  check_error(masked(WsOpcode::text, "ab\xe2", false) + masked(WsOpcode::continuation, "\x82"),
              ws_close::invalid_payload);
  // Binary messages are not validated.
  const auto events = parse_all(masked(WsOpcode::binary, "ab\xff"));
  REQUIRE(events.size() == 1);
  CHECK(events[0].kind == WsEvent::Kind::binary);

  // Fail fast: the error arrives with the bad fragment, before the message ends.
  WsFrameParser parser;
  parser.feed(masked(WsOpcode::text, "ok", false));
  CHECK_FALSE(parser.has_events());
  parser.feed(masked(WsOpcode::continuation, "\xc0\xaf", false));
  const auto fast = drain(parser);
  REQUIRE(fast.size() == 1);
  CHECK(fast[0].code == ws_close::invalid_payload);
}

TEST_CASE("parser: message size limit closes with 1009 without buffering") {
  WsParserLimits limits;
  limits.max_message_size = 100;
  CHECK(parse_all(masked(WsOpcode::binary, std::string(100, 'a')), limits).at(0).kind ==
        WsEvent::Kind::binary);
  check_error(masked(WsOpcode::binary, std::string(101, 'a')), ws_close::message_too_big, limits);
  check_error(masked(WsOpcode::text, std::string(60, 'a'), false) +
                  masked(WsOpcode::continuation, std::string(41, 'a')),
              ws_close::message_too_big, limits);

  // Only a header announcing 2^40 bytes: refused at once.
  WsFrameParser parser(limits);
  parser.feed(with_raw_length(0x82, uint64_t{1} << 40, ""));
  const auto events = drain(parser);
  REQUIRE(events.size() == 1);
  CHECK(events[0].code == ws_close::message_too_big);
  CHECK(parser.finished());

  // Control frames are not counted against the message limit.
  limits.max_message_size = 4;
  const auto mixed = parse_all(masked(WsOpcode::text, "ab", false) + masked(WsOpcode::ping, "0123456789") +
                                   masked(WsOpcode::continuation, "cd"),
                               limits);
  REQUIRE(mixed.size() == 2);
  CHECK(mixed[1].payload == "abcd");
}

TEST_CASE("encoder: header length forms") {
  struct Case {
    uint64_t length;
    uint8_t size;
  };
  for (const Case c : {Case{0, 2}, Case{125, 2}, Case{126, 4}, Case{65535, 4}, Case{65536, 10},
                       Case{uint64_t{1} << 40, 10}}) {
    const WsFrameHeader header = encode_frame_header(WsOpcode::binary, c.length);
    CHECK(header.size == c.size);
    CHECK(header.bytes[0] == 0x82);
    CHECK((header.bytes[1] & 0x80) == 0);  // servers never mask
  }
  const WsFrameHeader h16 = encode_frame_header(WsOpcode::text, 300);
  CHECK(h16.bytes[0] == 0x81);
  CHECK(h16.bytes[1] == 126);
  CHECK(h16.bytes[2] == 0x01);
  CHECK(h16.bytes[3] == 0x2c);
  const WsFrameHeader h64 = encode_frame_header(WsOpcode::binary, 70000);
  CHECK(std::string(h64.view()) == std::string("\x82\x7f\x00\x00\x00\x00\x00\x01\x11\x70", 10));
  CHECK(encode_frame_header(WsOpcode::text, 3, false).bytes[0] == 0x01);
}

TEST_CASE("encoder: whole frames") {
  CHECK(encode_text_frame("hi") == std::string("\x81\x02hi", 4));
  CHECK(encode_binary_frame("hi") == std::string("\x82\x02hi", 4));
  CHECK(encode_binary_frame(0x01, "hi") == std::string("\x82\x03\x01hi", 5));
  CHECK(encode_ping_frame() == std::string("\x89\x00", 2));
  CHECK(encode_pong_frame("x") == std::string("\x8a\x01x", 3));
  CHECK(encode_close_frame(1000, "process exited") == std::string("\x88\x10\x03\xe8process exited", 18));
  CHECK(encode_close_frame(4001, "TAKEN_OVER") == std::string("\x88\x0c\x0f\xa1TAKEN_OVER", 14));
  CHECK(encode_close_frame(ws_close::no_status) == std::string("\x88\x00", 2));
  CHECK(encode_pong_frame(std::string(200, 'p')).size() == 2 + 125);

  // A long reason is cut at a character boundary: 61 two-byte characters + 'a' = 123 bytes fits;
  // a leading 'a' pushes the last 'é' across byte 123 so it is dropped entirely.
  std::string reason = "a";
  for (int i = 0; i < 70; ++i) reason += "\xc3\xa9";
  const std::string close = encode_close_frame(1000, reason);
  CHECK(close.size() == 2 + 2 + 123);
  CHECK(is_valid_utf8(close.substr(4)));

  const WsFrameHeader prefixed = encode_binary_header_with_prefix(0x03, 70000);
  REQUIRE(prefixed.size == 11);
  CHECK(prefixed.bytes[9] == 0x71);  // 70001 = 0x11171
  CHECK(prefixed.bytes[10] == 0x03);
}

TEST_CASE("encoder: masked client frames round-trip through the parser") {
  const std::string payload = binary_payload(1000);
  const auto events = parse_all(encode_masked_frame(WsOpcode::binary, payload, kMask));
  REQUIRE(events.size() == 1);
  CHECK(events[0].payload == payload);
}
