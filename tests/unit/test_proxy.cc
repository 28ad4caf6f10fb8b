// Unit tests for protocol/proxy: the /proxy target split and port table, the
// request head sent upstream (token and hop-by-hop headers gone, X-Forwarded-*
// set, body framing), the response head given back, and the llhttp response
// parser fed at every split point (sized, chunked, close-delimited, HEAD,
// 1xx, 101, truncated).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "protocol/proxy.h"

using namespace execd::protocol;

namespace {

bool has_line(const std::string& head, const std::string& line) {
  return head.find("\r\n" + line + "\r\n") != std::string::npos;
}
bool has_name(const std::string& head, const std::string& name) {
  return head.find("\r\n" + name + ":") != std::string::npos;
}

struct Collected : ResponseVisitor {
  std::vector<HttpResponseHead> heads;
  std::string body;
  int completes = 0;
  bool keep_alive = false;
  void on_response_head(HttpResponseHead& h) override { heads.push_back(h); }
  void on_response_body(const char* d, size_t n) override { body.append(d, n); }
  void on_response_complete(bool ka) override {
    ++completes;
    keep_alive = ka;
  }
};

// Feeds `wire` split at `at` (two pieces), like two reads.
ResponseParser::Result feed_split(ResponseParser& p, const std::string& wire, size_t at, size_t& used) {
  size_t c1 = 0, c2 = 0;
  auto r = p.feed(wire.data(), at, c1);
  used = c1;
  if (r != ResponseParser::Result::need_more) return r;
  r = p.feed(wire.data() + at, wire.size() - at, c2);
  used += c2;
  return r;
}

}  // namespace

TEST_CASE("proxy target split keeps the rest byte for byte") {
  std::string_view port;
  std::string rest;
  REQUIRE(split_proxy_target("/proxy/8080/a/%2e%2e/b%2Fc?x=%20&y", port, rest));
  CHECK(port == "8080");
  CHECK(rest == "/a/%2e%2e/b%2Fc?x=%20&y");
  REQUIRE(split_proxy_target("/proxy/8080", port, rest));
  CHECK(rest == "/");
  REQUIRE(split_proxy_target("/proxy/8080?q=1", port, rest));
  CHECK(port == "8080");
  CHECK(rest == "/?q=1");
  REQUIRE(split_proxy_target("/proxy/8080/../x/", port, rest));
  CHECK(rest == "/../x/");
  REQUIRE(split_proxy_target("/proxy//x", port, rest));
  CHECK(port == "");
  CHECK_FALSE(split_proxy_target("/proxy", port, rest));
  CHECK_FALSE(split_proxy_target("/proxyx/80", port, rest));
}

TEST_CASE("proxy ports are canonical decimal 1-65535") {
  CHECK(parse_proxy_port("1") == 1);
  CHECK(parse_proxy_port("80") == 80);
  CHECK(parse_proxy_port("65535") == 65535);
  for (const char* bad : {"", "0", "65536", "+80", "080", "0x50", "abc", "-1", "99999", "100000", "8 0", "%38"})
    CHECK_MESSAGE(parse_proxy_port(bad) == 0, bad);
}

TEST_CASE("upstream request head: token and hop-by-hop headers gone, forwarding headers set") {
  HttpRequest req;
  req.method = "POST";
  req.headers = {{"host", "sandbox.example:44772"},
                 {"x-execd-access-token", "secret"},
                 {"connection", "keep-alive, X-Private"},
                 {"x-private", "1"},
                 {"keep-alive", "timeout=5"},
                 {"te", "trailers"},
                 {"trailer", "X-Sum"},
                 {"transfer-encoding", "chunked"},
                 {"upgrade", "h2c"},
                 {"proxy-authorization", "Basic x"},
                 {"proxy-connection", "keep-alive"},
                 {"expect", "100-continue"},
                 {"x-forwarded-for", "10.1.1.1"},
                 {"x-forwarded-host", "spoofed"},
                 {"content-type", "text/plain"},
                 {"accept", "*/*"}};
  UpstreamRequestInfo info;
  info.target = "/a%2Fb?q=1";
  info.client_ip = "172.17.0.1";
  info.prefix = "/proxy/8080";
  info.host_fallback = "127.0.0.1:8080";
  info.body = request_body_framing(req);
  CHECK(info.body == BodyFraming::chunked);
  std::string head = upstream_request_head(req, info);
  CHECK(head.rfind("POST /a%2Fb?q=1 HTTP/1.1\r\n", 0) == 0);
  CHECK(head.size() >= 4);
  CHECK(head.substr(head.size() - 4) == "\r\n\r\n");
  CHECK(has_line(head, "Host: sandbox.example:44772"));
  CHECK(has_line(head, "Content-Type: text/plain"));
  CHECK(has_line(head, "Accept: */*"));
  CHECK(has_line(head, "Transfer-Encoding: chunked"));
  CHECK(has_line(head, "X-Forwarded-For: 10.1.1.1, 172.17.0.1"));
  CHECK(has_line(head, "X-Forwarded-Proto: http"));
  CHECK(has_line(head, "X-Forwarded-Host: sandbox.example:44772"));
  CHECK(has_line(head, "X-Forwarded-Prefix: /proxy/8080"));
  CHECK(head.find("secret") == std::string::npos);
  for (const char* gone : {"X-Execd-Access-Token", "Connection", "X-Private", "Keep-Alive", "Te", "Trailer", "Upgrade",
                           "Proxy-Authorization", "Proxy-Connection", "Expect"})
    CHECK_MESSAGE(!has_name(head, gone), gone);
  CHECK(head.find("spoofed") == std::string::npos);
}

TEST_CASE("upstream request head: sized bodies, upgrades, no Host") {
  HttpRequest req;
  req.method = "PUT";
  req.headers = {{"content-length", "5"}};
  UpstreamRequestInfo info;
  info.target = "/";
  info.client_ip = "::1";
  info.prefix = "/proxy/81";
  info.host_fallback = "127.0.0.1:81";
  info.body = request_body_framing(req);
  CHECK(info.body == BodyFraming::sized);
  std::string head = upstream_request_head(req, info);
  CHECK(has_line(head, "Content-Length: 5"));
  CHECK(has_line(head, "Host: 127.0.0.1:81"));
  CHECK_FALSE(has_name(head, "X-Forwarded-Host"));

  HttpRequest ws;
  ws.method = "GET";
  ws.upgrade = true;
  ws.headers = {{"host", "h"}, {"connection", "Upgrade"}, {"upgrade", "websocket"}, {"sec-websocket-key", "k"}};
  info.body = request_body_framing(ws);
  CHECK(info.body == BodyFraming::none);
  head = upstream_request_head(ws, info);
  CHECK(has_line(head, "Upgrade: websocket"));
  CHECK(has_line(head, "Connection: Upgrade"));
  CHECK(has_line(head, "Sec-Websocket-Key: k"));
}

TEST_CASE("peer_ip and canonical names") {
  CHECK(peer_ip("10.0.0.1:5000") == "10.0.0.1");
  CHECK(peer_ip("[::1]:5000") == "::1");
  CHECK(canonical_header_name("x-forwarded-for") == "X-Forwarded-For");
  CHECK(canonical_header_name("ETAG") == "Etag");
}

TEST_CASE("client response headers drop hop-by-hop ones and keep the rest as sent") {
  HttpResponseHead h;
  h.status = 200;
  h.headers = {{"Content-Type", "text/html"}, {"Connection", "close, X-Hop"}, {"X-Hop", "1"},
               {"Transfer-Encoding", "chunked"}, {"Keep-Alive", "timeout=1"}, {"Set-Cookie", "a=1"},
               {"Set-Cookie", "b=2"}, {"Proxy-Authenticate", "Basic"}, {"Upgrade", "h2c"}};
  auto lines = client_response_headers(h);
  CHECK(lines == std::vector<std::string>{"Content-Type: text/html", "Set-Cookie: a=1", "Set-Cookie: b=2"});
  h.upgrade = true;
  h.status = 101;
  h.headers = {{"Upgrade", "websocket"}, {"Connection", "Upgrade"}, {"Sec-WebSocket-Accept", "x"}};
  lines = client_response_headers(h);
  CHECK(lines == std::vector<std::string>{"Upgrade: websocket", "Sec-WebSocket-Accept: x", "Connection: Upgrade"});
}

TEST_CASE("response parser at every split point") {
  struct Case {
    std::string wire;
    bool head_request;
    std::string body;
    bool sized, keep_alive;
    int status;
  };
  const std::vector<Case> cases = {
      {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false, "hello", true, true, 200},
      {"HTTP/1.1 201 Made It\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", false, "abcde",
       false, true, 201},
      {"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", false, "", false, true, 204},
      {"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", true, "", true, true, 200},
      {"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", false, "ok", true, false, 200},
  };
  for (const auto& c : cases) {
    for (size_t at = 0; at <= c.wire.size(); ++at) {
      Collected got;
      ResponseParser p(got);
      p.set_head_request(c.head_request);
      size_t used = 0;
      auto r = feed_split(p, c.wire, at, used);
      CAPTURE(c.wire);
      CAPTURE(at);
      REQUIRE(r == ResponseParser::Result::complete);
      CHECK(used == c.wire.size());
      REQUIRE(got.heads.size() == 1);
      CHECK(got.heads[0].status == c.status);
      CHECK(got.heads[0].content_length == c.sized);
      CHECK(got.body == c.body);
      CHECK(got.completes == 1);
      CHECK(got.keep_alive == c.keep_alive);
    }
  }
}

TEST_CASE("response parser: reason phrase, close-delimited bodies, truncation, trailing bytes") {
  {
    Collected got;
    ResponseParser p(got);
    std::string wire = "HTTP/1.1 299 Custom Thing\r\nX-A: b\r\n\r\nstream until close";
    size_t used;
    CHECK(p.feed(wire.data(), wire.size(), used) == ResponseParser::Result::need_more);
    REQUIRE(got.heads.size() == 1);
    CHECK(got.heads[0].reason == "Custom Thing");
    CHECK(got.heads[0].headers[0].first == "X-A");
    CHECK_FALSE(got.heads[0].content_length);
    CHECK(got.completes == 0);
    CHECK(p.finish() == ResponseParser::Result::complete);
    CHECK(got.body == "stream until close");
    CHECK(got.completes == 1);
    CHECK_FALSE(got.keep_alive);
  }
  {
    Collected got;
    ResponseParser p(got);
    std::string wire = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc";
    size_t used;
    p.feed(wire.data(), wire.size(), used);
    CHECK(p.head_done());
    CHECK(p.finish() == ResponseParser::Result::error);
    CHECK(got.completes == 0);
  }
  {
    Collected got;
    ResponseParser p(got);
    std::string wire = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n";
    size_t used;
    p.feed(wire.data(), wire.size(), used);
    CHECK(p.finish() == ResponseParser::Result::error);
  }
  {
    Collected got;
    ResponseParser p(got);
    CHECK_FALSE(p.started());
    CHECK(p.finish() == ResponseParser::Result::error);
  }
  {
    Collected got;
    ResponseParser p(got);
    std::string wire = "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxEXTRA";
    size_t used;
    CHECK(p.feed(wire.data(), wire.size(), used) == ResponseParser::Result::complete);
    CHECK(used == wire.size() - 5);
  }
  {
    Collected got;
    ResponseParser p(got);
    std::string wire = "garbage\r\n\r\n";
    size_t used;
    CHECK(p.feed(wire.data(), wire.size(), used) == ResponseParser::Result::error);
  }
}

TEST_CASE("response parser: 101 stops where the other protocol begins") {
  Collected got;
  ResponseParser p(got);
  std::string wire =
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x02hi";
  size_t used;
  CHECK(p.feed(wire.data(), wire.size(), used) == ResponseParser::Result::upgrade);
  CHECK(used == wire.size() - 4);
  REQUIRE(got.heads.size() == 1);
  CHECK(got.heads[0].upgrade);
  CHECK(got.heads[0].status == 101);
}

TEST_CASE("response parser: what is left of a body, for a caller that splices it") {
  size_t used = 0;
  SUBCASE("sized: counts down as body bytes are fed") {
    Collected got;
    ResponseParser p(got);
    std::string wire = "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + std::string(1000, 'x');
    CHECK(p.sized_body_left() == 0);  // nothing parsed yet
    REQUIRE(p.feed(wire.data(), wire.size(), used) == ResponseParser::Result::need_more);
    CHECK(p.sized_body_left() == 99000);
    CHECK_FALSE(p.in_close_delimited_body());
    CHECK(p.keep_alive());
  }
  SUBCASE("sized, Connection: close: not for reuse") {
    Collected got;
    ResponseParser p(got);
    std::string wire = "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 10\r\n\r\n";
    REQUIRE(p.feed(wire.data(), wire.size(), used) == ResponseParser::Result::need_more);
    CHECK(p.sized_body_left() == 10);
    CHECK_FALSE(p.keep_alive());
  }
  SUBCASE("close-delimited") {
    Collected got;
    ResponseParser p(got);
    std::string wire = "HTTP/1.1 200 OK\r\n\r\nabc";
    REQUIRE(p.feed(wire.data(), wire.size(), used) == ResponseParser::Result::need_more);
    CHECK(p.sized_body_left() == 0);
    CHECK(p.in_close_delimited_body());
    CHECK_FALSE(p.keep_alive());
  }
  SUBCASE("chunked, HEAD, 304 and complete responses have nothing to splice") {
    for (const char* w : {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n",
                          "HTTP/1.1 304 Not Modified\r\nContent-Length: 500000\r\n\r\n",
                          "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"}) {
      Collected got;
      ResponseParser p(got);
      std::string wire = w;
      p.feed(wire.data(), wire.size(), used);
      CHECK(p.sized_body_left() == 0);
      CHECK_FALSE(p.in_close_delimited_body());
    }
    Collected got;
    ResponseParser p(got);
    p.set_head_request(true);
    std::string wire = "HTTP/1.1 200 OK\r\nContent-Length: 500000\r\n\r\n";
    p.feed(wire.data(), wire.size(), used);
    CHECK(p.sized_body_left() == 0);
    CHECK_FALSE(p.in_close_delimited_body());
  }
  SUBCASE("interim 100 then a sized head") {
    Collected got;
    ResponseParser p(got);
    std::string wire = "HTTP/1.1 100 Continue\r\n\r\n";
    REQUIRE(p.feed(wire.data(), wire.size(), used) == ResponseParser::Result::need_more);
    CHECK(p.sized_body_left() == 0);
    CHECK_FALSE(p.in_close_delimited_body());
    wire = "HTTP/1.1 200 OK\r\nContent-Length: 70000\r\n\r\n";
    REQUIRE(p.feed(wire.data(), wire.size(), used) == ResponseParser::Result::need_more);
    CHECK(p.sized_body_left() == 70000);
  }
}
