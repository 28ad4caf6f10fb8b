// Unit tests for execd/http: WriteQueue on its own, and Connection driven
// through a fake transport and a fake host (no sockets, no loop): pipelining,
// partial writes, a close while a write is pending, backpressure at both
// water marks, an upgrade hand-over, write errors inside a source.
#include <doctest/doctest.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>

#include <climits>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "execd/http/connection.h"
#include "execd/http/server.h"
#include "execd/http/write_queue.h"
#include "http_rig.h"

using namespace execd::http;
using rig::FakeHost;
using rig::FakeTransport;
using rig::Rig;

namespace {

std::string get(const std::string& path) { return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n"; }

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

// Sends 64 KiB chunks while send() says yes.
struct GreedySource : Source {
  Exchange& ex;
  int proceeds = 0, stops = 0;
  size_t sent = 0, limit;
  bool last_send = true;
  GreedySource(Exchange& e, size_t l) : ex(e), limit(l) {}
  void pump() {
    while (sent < limit) {
      std::string chunk(64 * 1024, 'x');
      sent += chunk.size();
      last_send = ex.send(std::move(chunk));
      if (!last_send) return;
    }
    ex.end();
  }
  void proceed() override {
    ++proceeds;
    pump();
  }
  void stop() override { ++stops; }
};

// Routes every request to a chunked response fed by a GreedySource of 8 MiB;
// the returned pointer is set once the request is in.
GreedySource*& stream_greedily(Rig& r) {
  static GreedySource* src;
  src = nullptr;
  r.host.on_head = [](Exchange& ex) {
    ex.on_complete = [](Exchange& e) {
      e.begin_chunked(200, {});
      auto s = std::make_unique<GreedySource>(e, 8u << 20);
      src = s.get();
      e.attach(std::move(s));
      src->pump();
    };
  };
  return src;
}

}  // namespace

TEST_CASE("WriteQueue: gather, partial consume, water marks, file ranges") {
  WriteQueue q;
  q.append(std::string("hello "));
  q.append(std::string_view("world"));
  CHECK(q.bytes() == 11);
  struct iovec iov[8];
  int n = q.gather(iov, 8);
  std::string out;
  for (int i = 0; i < n; ++i) out.append(static_cast<char*>(iov[i].iov_base), iov[i].iov_len);
  CHECK(out == "hello world");
  q.consume(3);
  n = q.gather(iov, 8);
  out.clear();
  for (int i = 0; i < n; ++i) out.append(static_cast<char*>(iov[i].iov_base), iov[i].iov_len);
  CHECK(out == "lo world");
  CHECK(q.below_low_water());
  q.append(std::string(WriteQueue::kHighWater, 'y'));
  CHECK(q.above_high_water());
  q.append_file(std::make_shared<OpenFile>(-1), 100, 50);
  q.append(std::string("tail"));
  // gather stops before the file range
  n = q.gather(iov, 8);
  size_t before_file = 0;
  for (int i = 0; i < n; ++i) before_file += iov[i].iov_len;
  CHECK(before_file == 8 + WriteQueue::kHighWater);
  q.consume(before_file);
  REQUIRE(q.head_is_file());
  CHECK(q.head_file_offset() == 100);
  q.consume(20);
  CHECK(q.head_file_offset() == 120);
  CHECK(q.head_file_remaining() == 30);
  q.consume(30);
  CHECK_FALSE(q.head_is_file());
  CHECK(q.bytes() == 4);
}

TEST_CASE("Connection: pipelined requests are answered in order, one at a time") {
  Rig r;
  std::vector<Exchange*> seen;
  r.host.on_head = [&](Exchange& ex) {
    ex.on_complete = [&](Exchange& e) { seen.push_back(&e); };
  };
  r.start();
  r.feed(get("/a") + get("/b"));
  REQUIRE(seen.size() == 1);  // /b waits for /a's response
  CHECK(seen[0]->request().path == "/a");
  seen[0]->respond(200, "text/plain", "A");
  r.host.run_safe_point();
  REQUIRE(seen.size() == 2);
  CHECK(seen[1]->request().path == "/b");
  seen[1]->respond(200, "text/plain", "B");
  r.host.run_safe_point();
  size_t a = r.t->written.find("\r\n\r\nA"), b = r.t->written.find("\r\n\r\nB");
  CHECK(a != std::string::npos);
  CHECK(b != std::string::npos);
  CHECK(a < b);
}

TEST_CASE("Connection: partial writes are completed when the peer drains") {
  Rig r;
  std::string body(300000, 'z');
  r.host.on_head = [&](Exchange& ex) { ex.on_complete = [&](Exchange& e) { e.respond(200, "text/plain", body); }; };
  r.t->budget = 1000;
  r.start();
  r.feed(get("/big"));
  CHECK(r.t->written.size() == 1000);
  CHECK(r.t->writable);  // waiting for the peer
  while (r.t->writable) {
    r.t->budget = 7000;
    r.conn->on_transport_writable();
  }
  CHECK(r.t->written.size() > body.size());
  CHECK(r.t->written.substr(r.t->written.size() - body.size()) == body);
  CHECK(r.conn->queue().empty());
}

TEST_CASE("Connection: backpressure at the high and low water marks") {
  Rig r;
  GreedySource*& src = stream_greedily(r);
  r.t->budget = 0;
  r.start();
  r.feed(get("/stream"));
  REQUIRE(src);
  CHECK_FALSE(src->last_send);
  CHECK(r.conn->queue().above_high_water());
  CHECK(src->proceeds == 0);
  // Drains some, but not below the low-water mark: no proceed yet.
  r.t->budget = r.conn->queue().bytes() - WriteQueue::kLowWater;
  r.conn->on_transport_writable();
  CHECK(src->proceeds == 0);
  CHECK_FALSE(r.conn->queue().below_low_water());
  // Below the low-water mark: exactly one proceed, and the source resumes.
  r.t->budget = 200 * 1024;
  r.conn->on_transport_writable();
  CHECK(src->proceeds == 1);
  // Let everything through; the source finishes the response.
  while (src->sent < src->limit || !r.conn->queue().empty()) {
    r.t->budget = SIZE_MAX;
    r.conn->on_transport_writable();
  }
  r.host.run_safe_point();
  CHECK(count(r.t->written, "0\r\n\r\n") >= 1);
  CHECK(r.t->written.size() > (8u << 20));
}

TEST_CASE("Connection: a close while a write is pending stops the source once, at the safe point") {
  Rig r;
  GreedySource*& src = stream_greedily(r);
  r.t->budget = 100;
  r.start();
  r.feed(get("/stream"));
  REQUIRE(src);
  r.conn->close();
  CHECK(src->stops == 0);  // nothing happens inside the caller's frame
  CHECK_FALSE(src->ex.send(std::string("more")));  // sends after close are refused, not fatal
  r.finish_close();
  CHECK(r.t->closed);
  CHECK(r.host.connection_closed);
}

TEST_CASE("Connection: a write error inside a source's send is not fatal to the caller") {
  Rig r;
  int sends_after_error = 0, stops = 0;
  struct Probe : Source {
    int* stops;
    explicit Probe(int* s) : stops(s) {}
    void stop() override { ++*stops; }
  };
  r.host.on_head = [&](Exchange& ex) {
    ex.on_complete = [&](Exchange& e) {
      e.attach(std::make_unique<Probe>(&stops));
      e.begin_chunked(200, {});
      r.t->error = ECONNRESET;
      CHECK_FALSE(e.send(std::string("first")));
      // The exchange and its source are still alive: keep calling.
      for (int i = 0; i < 3; ++i) sends_after_error += e.send(std::string("again")) ? 0 : 1;
      e.end();
    };
  };
  r.start();
  r.feed(get("/x"));
  CHECK(sends_after_error == 3);
  CHECK(r.conn->closing());
  r.finish_close();
  CHECK(r.host.connection_closed);
  CHECK(stops == 0);  // it ended its response itself: nothing to stop
}

TEST_CASE("Connection: an upgrade hands every following byte to the new protocol") {
  struct Echo : Upgraded {
    std::string* got;
    int* stops;
    Echo(std::string* g, int* s) : got(g), stops(s) {}
    void on_data(const char* d, size_t n) override { got->append(d, n); }
    void stop() override { ++*stops; }
  };
  Rig r;
  std::string got;
  int stops = 0;
  r.host.on_head = [&](Exchange& ex) {
    ex.on_complete = [&](Exchange& e) {
      e.send_raw("HTTP/1.1 101 Switching Protocols\r\n\r\n");
      e.upgrade(std::make_unique<Echo>(&got, &stops));
    };
  };
  r.start();
  r.feed("GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nframe-1");
  CHECK(got == "frame-1");
  r.host.run_safe_point();
  r.feed("frame-2");
  CHECK(got == "frame-1frame-2");
  CHECK(r.t->written.rfind("HTTP/1.1 101", 0) == 0);
  r.conn->on_transport_eof();
  r.finish_close();
  CHECK(stops == 1);
}

TEST_CASE("Connection: Expect: 100-continue is answered only for invited requests") {
  Rig r;
  r.host.on_head = [&](Exchange& ex) {
    ex.invite_body = ex.request().path == "/ok";
    ex.on_complete = [](Exchange& e) { e.respond_empty(200); };
  };
  r.start();
  r.feed("POST /no HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n");
  CHECK(r.t->written.find("100 Continue") == std::string::npos);
  r.feed("hi");
  r.host.run_safe_point();
  r.feed("POST /ok HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nContent-Length: 2\r\n\r\n");
  CHECK(r.t->written.find("HTTP/1.1 100 Continue") != std::string::npos);
  r.feed("hi");
  CHECK(count(r.t->written, "HTTP/1.1 200") == 2);
}

TEST_CASE("Connection: the idle deadline applies only while the client owes a request") {
  Rig r;
  Exchange* held = nullptr;
  r.host.on_head = [&](Exchange& ex) { ex.on_complete = [&](Exchange& e) { held = &e; }; };
  r.start();
  r.feed(get("/slow"));
  REQUIRE(held);
  r.host.now += 60000;
  r.conn->tick(r.host.now);  // a response in progress is never cut
  CHECK_FALSE(r.conn->closing());
  held->respond_empty(200);
  r.host.run_safe_point();
  r.host.now += 4000;
  r.conn->tick(r.host.now);
  CHECK_FALSE(r.conn->closing());
  r.host.now += 2000;
  r.conn->tick(r.host.now);
  CHECK(r.conn->closing());
  r.finish_close();
}

TEST_CASE("Connection: a malformed request is answered 400 and the connection closes after it") {
  Rig r;
  r.host.on_head = [](Exchange& ex) { ex.on_complete = [](Exchange& e) { e.respond_empty(200); }; };
  r.start();
  r.feed("BLAH\x01 / HTTP/1.1\r\n\r\n");
  CHECK(r.t->written.rfind("HTTP/1.1 400", 0) == 0);
  CHECK(r.t->shut);  // lingering close: our side is shut, the peer may still read
  r.conn->on_transport_eof();
  r.finish_close();
  CHECK(r.host.connection_closed);
}

#include "execd/link.h"

namespace {
struct Producer;
struct Consumer {
  execd::Link<Producer> producer;
};
struct Producer {
  execd::Link<Consumer> consumer;
};
}  // namespace

TEST_CASE("Link: either end cuts both, and destroying an end cuts it") {
  Producer p;
  {
    Consumer c;
    execd::link(c, c.producer, p, p.consumer);
    CHECK(c.producer.get() == &p);
    CHECK(p.consumer.get() == &c);
    p.consumer.cut();
    CHECK_FALSE(c.producer);
    CHECK_FALSE(p.consumer);
    execd::link(c, c.producer, p, p.consumer);
    CHECK(p.consumer);
  }  // c destroyed
  CHECK_FALSE(p.consumer);
  CHECK(p.consumer.get() == nullptr);
  // Relinking cuts what an end held before.
  Consumer a, b;
  execd::link(a, a.producer, p, p.consumer);
  execd::link(b, b.producer, p, p.consumer);
  CHECK_FALSE(a.producer);
  CHECK(p.consumer.get() == &b);
}

TEST_CASE("peer_name writes IPv4 addresses as inet_ntop does, and IPv6 in brackets") {
  auto v4 = [](const char* ip, uint16_t port) {
    sockaddr_storage ss{};
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    REQUIRE(inet_pton(AF_INET, ip, &a->sin_addr) == 1);
    return peer_name(ss);
  };
  CHECK(v4("127.0.0.1", 40672) == "127.0.0.1:40672");
  CHECK(v4("0.0.0.0", 0) == "0.0.0.0:0");
  CHECK(v4("255.255.255.255", 65535) == "255.255.255.255:65535");
  CHECK(v4("10.200.3.99", 8) == "10.200.3.99:8");
  sockaddr_storage ss{};
  auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
  a6->sin6_family = AF_INET6;
  a6->sin6_port = htons(443);
  REQUIRE(inet_pton(AF_INET6, "::1", &a6->sin6_addr) == 1);
  CHECK(peer_name(ss) == "[::1]:443");
}
