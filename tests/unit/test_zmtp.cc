// Unit tests for protocol/zmtp: the bytes execd sends are the bytes libzmq
// sends (captured from libzmq 4.3.5 through pyzmq: a DEALER, a SUB and a REQ
// connecting to a raw socket, and a ROUTER, PUB and REP answering one);
// messages parse the same at every split point; the handshake's order,
// subscriptions by peer version, PING/PONG, REQ envelopes, the size limits
// (skipped messages leave the stream in step) and each protocol violation.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "protocol/zmtp.h"

using namespace execd::protocol::zmtp;

namespace {

std::string unhex(std::string_view h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out += static_cast<char>(std::stoi(std::string(h.substr(i, 2)), nullptr, 16));
  return out;
}

// Signature (0xFF, padding, 0x7F), version 3.1, "NULL", as-server 0, filler.
const std::string kGreeting3_1 = unhex("ff00000000000000017f03014e554c4c") + std::string(48, '\0');
// READY as libzmq's ROUTER, PUB and REP send it.
const std::string kRouterReady = unhex("04290552454144590b536f636b65742d5479706500000006524f55544552084964656e7469747900000000");
const std::string kPubReady = unhex("04190552454144590b536f636b65742d5479706500000003505542");
const std::string kRepReady = unhex("04190552454144590b536f636b65742d5479706500000003524550");

std::string greeting_with(int major, int minor, std::string_view mechanism = "NULL") {
  std::string g = kGreeting3_1;
  g[10] = static_cast<char>(major);
  g[11] = static_cast<char>(minor);
  std::fill(g.begin() + 12, g.begin() + 32, '\0');
  std::copy(mechanism.begin(), mechanism.end(), g.begin() + 12);
  return g;
}

std::vector<std::string> frames_of(const Message& m) {
  std::vector<std::string> v;
  for (auto f : m.views()) v.emplace_back(f);
  return v;
}

std::vector<std::vector<std::string>> drain(Connection& c) {
  std::vector<std::vector<std::string>> out;
  while (c.has_message()) out.push_back(frames_of(c.pop()));
  return out;
}

Connection ready_dealer(Limits limits = {}) {
  Connection c(SocketType::dealer, limits);
  c.output().clear();
  REQUIRE(c.feed((kGreeting3_1 + kRouterReady).data(), kGreeting3_1.size() + kRouterReady.size()));
  REQUIRE(c.ready());
  c.output().clear();
  return c;
}

}  // namespace

TEST_CASE("zmtp: what execd sends is what libzmq sends") {
  CHECK(greeting() == kGreeting3_1);
  // DEALER: greeting, READY with Socket-Type and an empty Identity, then a
  // message ["a", "bc"] once the ROUTER's READY is in.
  Connection dealer(SocketType::dealer);
  dealer.send({"a", "bc"});
  CHECK(dealer.output() == kGreeting3_1 + unhex("04290552454144590b536f636b65742d54797065000000064445414c4552084964656e7469747900000000"));
  CHECK(dealer.waiting_bytes() > 0);
  dealer.output().clear();
  std::string in = kGreeting3_1 + kRouterReady;
  REQUIRE(dealer.feed(in.data(), in.size()));
  CHECK(dealer.output() == unhex("01016100026263"));
  // SUB: no Identity; a 3.1 PUB gets the SUBSCRIBE command.
  Connection sub(SocketType::sub);
  sub.subscribe("");
  in = kGreeting3_1 + kPubReady;
  REQUIRE(sub.feed(in.data(), in.size()));
  CHECK(sub.output() == kGreeting3_1 + unhex("04190552454144590b536f636b65742d5479706500000003535542") +
                            unhex("040a09535542534352494245"));
  // REQ: the empty delimiter in front.
  Connection req(SocketType::req);
  req.send({"a", "bc"});
  in = kGreeting3_1 + kRepReady;
  REQUIRE(req.feed(in.data(), in.size()));
  CHECK(req.output() == kGreeting3_1 +
                            unhex("04260552454144590b536f636b65742d5479706500000003524551084964656e7469747900000000") +
                            unhex("010001016100026263"));
}

TEST_CASE("zmtp: a 3.0 publisher gets the subscription as a message") {
  Connection sub(SocketType::sub);
  sub.subscribe("ab");
  sub.output().clear();
  std::string in = greeting_with(3, 0) + kPubReady;
  REQUIRE(sub.feed(in.data(), in.size()));
  CHECK(sub.peer_minor() == 0);
  CHECK(sub.output() == unhex("0003016162"));
  // A later subscription goes out at once, in the same form.
  sub.output().clear();
  sub.subscribe("");
  CHECK(sub.output() == unhex("000101"));
}

TEST_CASE("zmtp: messages parse the same at every split point") {
  std::string wire;
  std::string big(300, 'x');  // a long frame (8-byte size)
  append_message(wire, {"id", "<IDS|MSG>", big, ""});
  append_message(wire, {"solo"});
  wire += command_frame("PING", std::string("\0\x0a", 2) + "ctx");
  append_message(wire, {std::string(256, 'y'), std::string(255, 'z')});
  for (size_t a = 0; a <= wire.size(); ++a) {
    for (size_t b = a; b <= wire.size(); b += 13) {
      Connection c = ready_dealer();
      REQUIRE(c.feed(wire.data(), a));
      REQUIRE(c.feed(wire.data() + a, b - a));
      REQUIRE(c.feed(wire.data() + b, wire.size() - b));
      auto got = drain(c);
      REQUIRE(got.size() == 3);
      CHECK(got[0] == std::vector<std::string>{"id", "<IDS|MSG>", big, ""});
      CHECK(got[1] == std::vector<std::string>{"solo"});
      CHECK(got[2] == std::vector<std::string>{std::string(256, 'y'), std::string(255, 'z')});
      CHECK(c.output() == pong_command("ctx"));
    }
  }
}

TEST_CASE("zmtp: byte by byte, from the greeting on") {
  std::string wire = kGreeting3_1 + kRouterReady;
  append_message(wire, {"k", "v"});
  Connection c(SocketType::dealer);
  c.send({"early"});
  for (size_t i = 0; i < wire.size(); ++i) {
    if (i < kGreeting3_1.size() + kRouterReady.size()) CHECK(!c.ready());
    REQUIRE(c.feed(&wire[i], 1));
  }
  CHECK(c.ready());
  CHECK(c.peer_metadata().size() == 2);
  CHECK(drain(c) == std::vector<std::vector<std::string>>{{"k", "v"}});
  // What waited for the handshake follows READY, in order.
  std::string expect = kGreeting3_1 + ready_command(SocketType::dealer);
  append_message(expect, {"early"});
  CHECK(c.output() == expect);
}

TEST_CASE("zmtp: queued bytes are counted until popped") {
  Connection c = ready_dealer();
  std::string wire;
  append_message(wire, {"abc", "de"});
  append_message(wire, {"f"});
  REQUIRE(c.feed(wire.data(), wire.size()));
  CHECK(c.queued_bytes() == 6);
  CHECK(c.pop().size() == 2);
  CHECK(c.queued_bytes() == 1);
  CHECK(c.pop().bytes() == 1);
  CHECK(c.queued_bytes() == 0);
  CHECK(!c.has_message());
}

TEST_CASE("zmtp: REQ takes the delimiter off and ignores replies without one") {
  Connection c(SocketType::req);
  std::string wire = kGreeting3_1 + kRepReady;
  append_message(wire, {"", "ping"});
  append_message(wire, {"no-delimiter"});
  append_message(wire, {"", "again"});
  REQUIRE(c.feed(wire.data(), wire.size()));
  CHECK(drain(c) == std::vector<std::vector<std::string>>{{"ping"}, {"again"}});
  // A ROUTER echoing (as ipykernel's heartbeat does) is a peer REQ accepts.
  Connection r(SocketType::req);
  wire = kGreeting3_1 + kRouterReady;
  REQUIRE(r.feed(wire.data(), wire.size()));
  CHECK(r.ready());
}

TEST_CASE("zmtp: SUB hands over only what matches a subscription") {
  Connection c(SocketType::sub);
  c.subscribe("kernel.");
  std::string wire = kGreeting3_1 + kPubReady;
  append_message(wire, {"kernel.1.status", "x"});
  append_message(wire, {"other", "y"});
  REQUIRE(c.feed(wire.data(), wire.size()));
  CHECK(drain(c) == std::vector<std::vector<std::string>>{{"kernel.1.status", "x"}});
}

TEST_CASE("zmtp: a message over the limits is skipped and the stream stays in step") {
  Limits limits;
  limits.max_message = 1000;
  limits.max_frames = 4;
  Connection c = ready_dealer(limits);
  std::string wire;
  append_message(wire, {std::string(600, 'a'), std::string(600, 'b'), "tail"});  // 1204 bytes
  append_message(wire, {"ok1"});
  append_message(wire, {"1", "2", "3", "4", "5"});  // five frames
  append_message(wire, {std::string(1000, 'c')});    // exactly the limit
  for (size_t i = 0; i < wire.size(); i += 97) REQUIRE(c.feed(wire.data() + i, std::min<size_t>(97, wire.size() - i)));
  auto got = drain(c);
  REQUIRE(got.size() == 2);
  CHECK(got[0] == std::vector<std::string>{"ok1"});
  CHECK(got[1][0].size() == 1000);
  CHECK(c.dropped_messages() == 2);
  CHECK(c.dropped_bytes() == 1204 + 5);
}

TEST_CASE("zmtp: a frame that claims more than the limit allocates nothing") {
  Connection c = ready_dealer();
  std::string wire;
  append_frame_header(wire, uint64_t{1} << 62, false, false);
  wire += "only a little";
  REQUIRE(c.feed(wire.data(), wire.size()));
  CHECK(!c.has_message());
  CHECK(c.queued_bytes() == 0);
  CHECK(c.dropped_messages() == 0);  // (counted when it ends)
}

TEST_CASE("zmtp: PING gets PONG with its context; other commands are ignored") {
  Connection c = ready_dealer();
  std::string wire = command_frame("PING", std::string("\0\0", 2));
  wire += command_frame("PONG", "");
  wire += command_frame("SUBSCRIBE", "x");
  wire += command_frame("FUTURE", "whatever");
  append_message(wire, {"after"});
  REQUIRE(c.feed(wire.data(), wire.size()));
  CHECK(c.output() == pong_command(""));
  CHECK(drain(c) == std::vector<std::vector<std::string>>{{"after"}});
}

TEST_CASE("zmtp: metadata round trip and malformed metadata") {
  std::string m;
  append_property(m, "Socket-Type", "ROUTER");
  append_property(m, "X-Big", std::string(300, 'v'));
  std::vector<Property> props;
  REQUIRE(parse_metadata(m, props));
  REQUIRE(props.size() == 2);
  CHECK(props[1].value.size() == 300);
  for (size_t cut = 1; cut < m.size(); ++cut) {
    if (cut == 1 + 11 + 4 + 6) continue;  // a whole first property is valid
    std::vector<Property> p;
    CHECK_MESSAGE(!parse_metadata(std::string_view(m).substr(0, cut), p), cut);
  }
  std::vector<Property> p;
  CHECK(!parse_metadata(std::string("\0", 1), p));
}

TEST_CASE("zmtp: every protocol violation fails the connection with a reason") {
  struct Case {
    const char* what;
    std::string bytes;
    const char* reason;
  };
  std::string big_cmd;
  append_frame_header(big_cmd, 100000, false, true);
  std::string data_in_handshake;
  append_message(data_in_handshake, {"x"});
  std::string multipart_then_cmd;
  append_frame_header(multipart_then_cmd, 1, true, false);
  multipart_then_cmd += "a" + command_frame("PING", std::string(2, '\0'));
  const std::string hello = kGreeting3_1 + kRouterReady;
  std::vector<Case> cases = {
      {"HTTP", "GET / HTTP/1.1\r\n\r\n", "first byte"},
      {"bad signature end", std::string("\xff\0\0\0\0\0\0\0\1\x7e", 10), "0x7F"},
      {"ZMTP 2", greeting_with(1, 0).substr(0, 11), "ZMTP 1.x"},
      {"PLAIN", greeting_with(3, 1, "PLAIN"), "PLAIN mechanism"},
      {"CURVE", greeting_with(3, 0, "CURVE"), "CURVE mechanism"},
      {"data before READY", kGreeting3_1 + data_in_handshake, "before the handshake"},
      {"another command first", kGreeting3_1 + command_frame("PING", std::string(2, '\0')), "PING during the handshake"},
      {"ERROR", kGreeting3_1 + command_frame("ERROR", std::string("\x05nope!", 6)), "ERROR: nope!"},
      {"no socket type", kGreeting3_1 + command_frame("READY", ""), "without a Socket-Type"},
      {"wrong peer", kGreeting3_1 + command_frame("READY", [] {
         std::string m;
         append_property(m, "socket-type", "PUB");
         return m;
       }()), "PUB socket"},
      {"bad metadata", kGreeting3_1 + command_frame("READY", "\x0bSocket-Type\0\0"), "malformed READY"},
      {"second READY", hello + kRouterReady, "second READY"},
      {"reserved bits", hello + std::string("\x08\x01x", 3), "reserved"},
      {"command with MORE", hello + std::string("\x05\x01x", 3), "MORE"},
      {"command in a message", hello + multipart_then_cmd, "inside a multipart"},
      {"huge command", hello + big_cmd, "command of 100000 bytes"},
      {"empty command", hello + std::string("\x04\x00", 2), "empty command"},
      {"bad command name", hello + std::string("\x04\x02\x09P", 4), "malformed command"},
      {"short PING", hello + command_frame("PING", "x"), "TTL"},
      {"long PING context", hello + command_frame("PING", std::string(2, '\0') + std::string(17, 'c')), "16 bytes"},
  };
  for (const auto& k : cases) {
    CAPTURE(k.what);
    Connection c(SocketType::dealer);
    CHECK(!c.feed(k.bytes.data(), k.bytes.size()));
    CHECK(c.failed());
    CHECK_MESSAGE(c.error().find(k.reason) != std::string::npos, c.error());
    // Nothing more is taken once failed.
    CHECK(!c.feed("\x00\x01x", 3));
    CHECK(!c.has_message());
  }
}

TEST_CASE("zmtp: a newer peer is talked to as 3.1") {
  Connection sub(SocketType::sub);
  sub.subscribe("");
  sub.output().clear();
  std::string in = greeting_with(4, 0) + kPubReady;
  REQUIRE(sub.feed(in.data(), in.size()));
  CHECK(sub.peer_minor() == 1);
  CHECK(sub.output() == command_frame("SUBSCRIBE", ""));
}
