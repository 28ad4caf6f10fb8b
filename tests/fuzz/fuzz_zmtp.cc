// Fuzz target: the ZMTP codec of protocol/zmtp, as a kernel's end of the
// connection could speak it. The first input byte picks the socket type, the
// chunking, and whether a valid greeting and READY come first (so the fuzzer
// spends its time on frames); the rest is what the peer sent. Checks:
//  - feeding the bytes in one piece, byte by byte and in the chosen chunks
//    gives the same outcome: the same messages, the same error, the same
//    skipped counts, the same bytes to send back;
//  - no message is over the limits, queued_bytes() is the sum of what waits;
//  - every message, encoded again and fed to a fresh connection, comes out
//    the same (a REQ reply with its delimiter put back).
#include <cstdlib>
#include <string>
#include <vector>

#include "protocol/zmtp.h"

namespace {

using namespace execd::protocol::zmtp;

struct Outcome {
  std::vector<std::vector<std::string>> messages;
  bool failed = false;
  std::string error, output;
  uint64_t dropped_messages = 0, dropped_bytes = 0;
  bool operator==(const Outcome&) const = default;
};

Limits small_limits() {
  Limits l;
  l.max_message = 4096;
  l.max_frames = 16;
  l.max_command = 512;
  return l;
}

std::string peer_hello(SocketType t) {
  std::string props;
  append_property(props, "Socket-Type", t == SocketType::sub ? "PUB" : t == SocketType::req ? "REP" : "ROUTER");
  std::string g(kGreetingSize, '\0');
  g[0] = static_cast<char>(0xff);
  g[9] = 0x7f;
  g[10] = 3;
  g[11] = 1;
  g.replace(12, 4, "NULL");
  return g + command_frame("READY", props);
}

Outcome run(SocketType t, std::string_view in, size_t chunk) {
  Connection c(t, small_limits());
  if (t == SocketType::sub) c.subscribe("");
  Outcome o;
  for (size_t at = 0; at < in.size(); at += chunk) {
    std::string_view part = in.substr(at, chunk);
    c.feed(part.data(), part.size());
    while (c.has_message()) {
      Message m = c.pop();
      if (m.bytes() > small_limits().max_message || m.size() > small_limits().max_frames) std::abort();
      uint64_t sum = 0;
      std::vector<std::string> frames;
      for (auto f : m.views()) {
        sum += f.size();
        frames.emplace_back(f);
      }
      if (sum != m.bytes()) std::abort();
      o.messages.push_back(std::move(frames));
    }
    if (c.queued_bytes() != 0) std::abort();
  }
  o.failed = c.failed();
  o.error = c.error();
  o.output = c.output();
  o.dropped_messages = c.dropped_messages();
  o.dropped_bytes = c.dropped_bytes();
  return o;
}

void round_trip(SocketType t, const std::vector<std::string>& frames) {
  Connection c(t, small_limits());
  if (t == SocketType::sub) c.subscribe("");
  std::string wire = peer_hello(t);
  std::vector<std::string_view> views;
  if (t == SocketType::req) views.emplace_back();
  for (const auto& f : frames) views.emplace_back(f);
  append_message(wire, views);
  if (!c.feed(wire.data(), wire.size()) || !c.has_message()) std::abort();
  Message m = c.pop();
  if (m.size() != frames.size()) std::abort();
  for (size_t i = 0; i < frames.size(); ++i)
    if (m.frame(i) != frames[i]) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t sel = data[0];
  const SocketType t = static_cast<SocketType>((sel & 3) % 3);
  const size_t chunk = 1 + ((sel >> 2) & 0x1f) * 7;
  std::string in = (sel & 0x80) ? peer_hello(t) : std::string();
  in.append(reinterpret_cast<const char*>(data + 1), size - 1);

  Outcome whole = run(t, in, in.size() ? in.size() : 1);
  Outcome bytes = run(t, in, 1);
  Outcome chunked = run(t, in, chunk);
  if (!(whole == bytes) || !(whole == chunked)) std::abort();
  if (whole.failed && whole.error.empty()) std::abort();
  for (const auto& m : whole.messages) round_trip(t, m);
  return 0;
}
