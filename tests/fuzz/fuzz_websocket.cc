// Fuzz target: the WebSocket frame parser (client frames) and the frame
// encoders. Feeding the same bytes whole or in pieces must give the same
// events; every data message the parser accepts, re-encoded as a masked client
// frame and parsed again, must come back byte for byte.
#include <cstdlib>
#include <string>
#include <vector>

#include "protocol/websocket.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using namespace execd::protocol;

std::vector<WsEvent> parse(const std::vector<std::string_view>& pieces) {
  WsFrameParser parser(WsParserLimits{1 << 16});
  std::vector<WsEvent> events;
  for (auto p : pieces) {
    parser.feed(p);
    WsEvent ev;
    while (parser.next_event(ev)) events.push_back(std::move(ev));
  }
  return events;
}

bool same(const std::vector<WsEvent>& a, const std::vector<WsEvent>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].kind != b[i].kind || a[i].payload != b[i].payload || a[i].code != b[i].code) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Splitter splitter(data, size);
  auto whole = parse({splitter.all()});
  auto split = parse(splitter.pieces());
  if (!same(whole, split)) std::abort();

  const uint8_t mask[4] = {0x12, 0x34, 0x56, 0x78};
  for (const WsEvent& ev : whole) {
    if (ev.kind == WsEvent::Kind::text && !is_valid_utf8(ev.payload)) std::abort();
    if (ev.kind != WsEvent::Kind::text && ev.kind != WsEvent::Kind::binary) continue;
    WsOpcode op = ev.kind == WsEvent::Kind::text ? WsOpcode::text : WsOpcode::binary;
    std::string frame = encode_masked_frame(op, ev.payload, mask);
    auto again = parse({frame});
    if (again.size() != 1 || again[0].kind != ev.kind || again[0].payload != ev.payload) std::abort();
  }
  // Server-side encoders: the header announces exactly the payload that follows.
  std::string payload(splitter.all().substr(0, 300));
  std::string frame = encode_binary_frame(payload);
  if (frame.size() < payload.size() + 2 || frame.compare(frame.size() - payload.size(), payload.size(), payload) != 0)
    std::abort();
  // The opening handshake: header values taken from the input.
  auto parts = fuzz::two_parts(data, size);
  std::string_view key = parts.first, rest = parts.second;
  HeaderLookup lookup = [&](std::string_view name) -> std::optional<std::string_view> {
    if (name == "Sec-WebSocket-Key") return key;
    if (name == "Sec-WebSocket-Version") return rest.substr(0, 8);
    if (name == "Connection") return rest;
    if (name == "Upgrade") return std::string_view("websocket");
    return std::nullopt;
  };
  HandshakeResult hs = check_websocket_upgrade("GET", lookup);
  if (hs.response.empty()) std::abort();
  return 0;
}
