// Unit tests for protocol/http: the llhttp request parser fed at every split
// point, its limits (413, 431), malformed input (400), pipelining, and the
// query and percent-decoding helpers.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "protocol/http.h"

using namespace execd::protocol;

namespace {

struct Collector : RequestVisitor {
  std::vector<HttpRequest> requests;
  std::string streamed;
  BodyMode mode = BodyMode::buffer;
  BodyMode on_request_head(HttpRequest&) override { return mode; }
  void on_body(const char* d, size_t n) override { streamed.append(d, n); }
  void on_request(HttpRequest& r) override { requests.push_back(r); }
};

// Feeds the pieces like a connection does: keeps unconsumed bytes and resumes
// after each complete request.
RequestParser::Result feed_all(RequestParser& p, const std::vector<std::string>& pieces) {
  std::string pending;
  RequestParser::Result last = RequestParser::Result::need_more;
  for (const auto& piece : pieces) {
    pending += piece;
    while (!pending.empty()) {
      size_t used = 0;
      last = p.feed(pending.data(), pending.size(), used);
      pending.erase(0, used);
      if (last == RequestParser::Result::paused) {
        p.resume();
        continue;
      }
      if (last == RequestParser::Result::error || last == RequestParser::Result::upgrade) return last;
      break;
    }
  }
  return last;
}

const std::string kTwoRequests =
    "POST /command?x=1&y=a%20b HTTP/1.1\r\nHost: h\r\nX-EXECD-Access-Token: t\r\nContent-Length: 17\r\n\r\n"
    "{\"command\":\"ls\"}\n"
    "GET /command/status/abc HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n";

}  // namespace

TEST_CASE("requests parse identically at every split point") {
  for (size_t i = 0; i <= kTwoRequests.size(); ++i) {
    Collector c;
    RequestParser p(c, {});
    feed_all(p, {kTwoRequests.substr(0, i), kTwoRequests.substr(i)});
    REQUIRE(c.requests.size() == 2);
    CHECK(c.requests[0].method == "POST");
    CHECK(c.requests[0].path == "/command");
    CHECK(c.requests[0].query == "x=1&y=a%20b");
    CHECK(*c.requests[0].header("x-execd-access-token") == "t");
    CHECK(c.requests[0].body == "{\"command\":\"ls\"}\n");
    CHECK(c.requests[0].keep_alive);
    CHECK(c.requests[1].method == "GET");
    CHECK(c.requests[1].path == "/command/status/abc");
    CHECK_FALSE(c.requests[1].keep_alive);
  }
}

TEST_CASE("chunked bodies are reassembled") {
  Collector c;
  RequestParser p(c, {});
  feed_all(p, {"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"});
  REQUIRE(c.requests.size() == 1);
  CHECK(c.requests[0].body == "abcde");
}

TEST_CASE("streamed bodies go to on_body and are not buffered") {
  Collector c;
  c.mode = BodyMode::stream;
  RequestParser::Limits limits;
  limits.max_body_bytes = 4;  // applies to buffered bodies only
  RequestParser p(c, limits);
  CHECK(feed_all(p, {"POST /u HTTP/1.1\r\nContent-Length: 10\r\n\r\n01234", "56789"}) != RequestParser::Result::error);
  CHECK(c.streamed == "0123456789");
  REQUIRE(c.requests.size() == 1);
  CHECK(c.requests[0].body.empty());
}

TEST_CASE("limits: oversized bodies are 413, oversized heads 431") {
  {
    Collector c;
    RequestParser::Limits limits;
    limits.max_body_bytes = 10;
    RequestParser p(c, limits);
    CHECK(feed_all(p, {"POST /x HTTP/1.1\r\nContent-Length: 11\r\n\r\n"}) == RequestParser::Result::error);
    CHECK(p.error().status == 413);
  }
  {
    Collector c;
    RequestParser::Limits limits;
    limits.max_body_bytes = 10;
    RequestParser p(c, limits);
    CHECK(feed_all(p, {"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n8\r\n12345678\r\n"}) ==
          RequestParser::Result::error);
    CHECK(p.error().status == 413);
  }
  {
    Collector c;
    RequestParser::Limits limits;
    limits.max_head_bytes = 100;
    RequestParser p(c, limits);
    CHECK(feed_all(p, {"GET /x HTTP/1.1\r\nX-Big: " + std::string(200, 'a') + "\r\n\r\n"}) ==
          RequestParser::Result::error);
    CHECK(p.error().status == 431);
  }
}

TEST_CASE("malformed requests are 400") {
  for (std::string bad : {"GARBAGE\r\n\r\n", "GET / HTTP/9.9\r\n\r\n", "GET /x HTTP/1.1\r\nBad Header\r\n\r\n",
                          "GET x HTTP/1.1\r\n\r\n", "GET /a%zz HTTP/1.1\r\n\r\n",
                          "POST /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"}) {
    Collector c;
    RequestParser p(c, {});
    CHECK(feed_all(p, {bad}) == RequestParser::Result::error);
    CHECK(p.error().status == 400);
    CHECK(c.requests.empty());
  }
}

TEST_CASE("upgrade requests stop the parser at the first byte of the new protocol") {
  Collector c;
  RequestParser p(c, {});
  std::string req = "GET /pty/1/ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";
  std::string data = req + "\x81\x85";
  size_t used = 0;
  CHECK(p.feed(data.data(), data.size(), used) == RequestParser::Result::upgrade);
  CHECK(used == req.size());
  REQUIRE(c.requests.size() == 1);
  CHECK(c.requests[0].upgrade);
}

TEST_CASE("query strings and percent-decoding") {
  auto q = parse_query("path=%2Ftmp%2Fa+b&path=x&empty=&flag&bad=%zz");
  REQUIRE(q.size() == 5);
  CHECK(q[0].second == "/tmp/a b");
  CHECK(q[1].second == "x");
  CHECK(*query_value(q, "path") == "/tmp/a b");
  CHECK(query_value(q, "empty")->empty());
  CHECK(query_value(q, "flag")->empty());
  CHECK(*query_value(q, "bad") == "%zz");
  CHECK(query_value(q, "nope") == nullptr);
  std::string out;
  CHECK(percent_decode("a%41", out, false));
  CHECK(out == "aA");
  CHECK_FALSE(percent_decode("a%4", out, false));
  CHECK_FALSE(percent_decode("%", out, false));
}

TEST_CASE("response heads") {
  std::string r = simple_response(404, "application/json", "{}", false, {"X-A: b"});
  CHECK(r == "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
             "Connection: close\r\nX-A: b\r\n\r\n{}");
  std::string chunk;
  append_chunk(chunk, std::string(26, 'z'));
  CHECK(chunk.substr(0, 4) == "1a\r\n");
}
