// tests/unit/test_multipart.cc — streaming multipart parser: every split
// point, byte-by-byte feeding, header parsing and error cases.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "protocol/multipart.h"

using execd::protocol::boundary_from_content_type;
using execd::protocol::MultipartCallbacks;
using execd::protocol::MultipartError;
using execd::protocol::MultipartParser;
using execd::protocol::parse_header_value;
using execd::protocol::PartHeaders;

namespace {

struct CollectedPart {
  std::string name;
  std::optional<std::string> filename;
  std::string content_type;
  std::string data;
  bool ended = false;
  bool operator==(const CollectedPart&) const = default;
};

struct Collector {
  std::vector<CollectedPart> parts;
  size_t data_calls = 0;

  MultipartCallbacks callbacks() {
    return MultipartCallbacks{
        [this](const PartHeaders& h) {
          parts.push_back(CollectedPart{h.name, h.filename, h.content_type, {}, false});
        },
        [this](std::string_view chunk) {
          REQUIRE(!parts.empty());
          CHECK(!chunk.empty());
          CHECK(!parts.back().ended);
          parts.back().data += chunk;
          ++data_calls;
        },
        [this] {
          REQUIRE(!parts.empty());
          parts.back().ended = true;
        },
    };
  }
};

const std::string kBoundary = "----X-boundary-42";

std::string binary_payload() {
  // Near misses of the delimiter "\r\n------X-boundary-42" and a padded
  // lookalike that is not followed by CRLF.
  std::string s = "bin\r\n--";
  s += "\r\n------X-boundary-4";                 // truncated boundary
  s += "\r\n------X-boundary-43\r\n";             // different final char
  s += "\r\r\n------X-boundary-4";                // CR before a near-miss
  s += "\r\n------X-boundary-42x";                // boundary followed by garbage
  s += "\r\n------X-boundary-42-x";               // single dash after boundary
  s += "\r\n------X-boundary-42  y";              // padding then non-CRLF
  s += "\r\n------X-boundary-42\rz";              // CR without LF
  s += std::string("\0\xff\r\n\r", 5);
  s += "\r\n";                                    // ends with CRLF of its own
  return s;
}

std::string sample_body() {
  std::string body = "preamble to ignore\r\n";
  body += "--" + kBoundary + "\r\n";
  body += "Content-Disposition: form-data; name=\"metadata\"; filename=\"metadata\"\r\n";
  body += "Content-Type: application/json\r\n\r\n";
  body += "{\"path\":\"/tmp/a\"}";
  body += "\r\n--" + kBoundary + "\r\n";
  body += "content-disposition: form-data; name=file; filename=\"we\\\"ird \\\\name.bin\"\r\n";
  body += "Content-Type: application/octet-stream\r\n\r\n";
  body += binary_payload();
  body += "\r\n--" + kBoundary + "  \t\r\n";  // transport padding is allowed
  body += "Content-Disposition: form-data; name=\"empty\"\r\n\r\n";
  body += "\r\n--" + kBoundary + "\r\n";
  body += "\r\n";  // a part with no headers at all
  body += "x";
  body += "\r\n--" + kBoundary + "--\r\nepilogue --" + kBoundary + "\r\n garbage";
  return body;
}

std::vector<CollectedPart> expected_parts() {
  return {
      {"metadata", "metadata", "application/json", "{\"path\":\"/tmp/a\"}", true},
      {"file", "we\"ird \\name.bin", "application/octet-stream", binary_payload(), true},
      {"empty", std::nullopt, "", "", true},
      {"", std::nullopt, "", "x", true},
  };
}

}  // namespace

TEST_CASE("multipart: whole body in one feed") {
  Collector collector;
  MultipartParser parser(kBoundary, collector.callbacks());
  std::string body = sample_body();
  CHECK(parser.feed(body));
  CHECK(parser.finish());
  CHECK(parser.complete());
  CHECK(collector.parts == expected_parts());
}

TEST_CASE("multipart: every two-piece split yields identical parts") {
  const std::string body = sample_body();
  const auto expected = expected_parts();
  for (size_t split = 0; split <= body.size(); ++split) {
    Collector collector;
    MultipartParser parser(kBoundary, collector.callbacks());
    CHECK(parser.feed(body.data(), split));
    CHECK(parser.feed(body.data() + split, body.size() - split));
    CHECK(parser.finish());
    INFO("split at " << split);
    CHECK(collector.parts == expected);
  }
}

TEST_CASE("multipart: byte-by-byte feeding") {
  const std::string body = sample_body();
  Collector collector;
  MultipartParser parser(kBoundary, collector.callbacks());
  for (char c : body) REQUIRE(parser.feed(&c, 1));
  CHECK(parser.finish());
  CHECK(collector.parts == expected_parts());
}

TEST_CASE("multipart: three-piece splits around the delimiters") {
  const std::string body = sample_body();
  const auto expected = expected_parts();
  // Exhaustive three-way splits would be O(n^2) runs; step the first cut.
  for (size_t a = 0; a <= body.size(); a += 7) {
    for (size_t b = a; b <= body.size(); b += 3) {
      Collector collector;
      MultipartParser parser(kBoundary, collector.callbacks());
      parser.feed(body.data(), a);
      parser.feed(body.data() + a, b - a);
      parser.feed(body.data() + b, body.size() - b);
      REQUIRE(parser.finish());
      REQUIRE(collector.parts == expected);
    }
  }
}

TEST_CASE("multipart: data is streamed, not accumulated") {
  std::string payload(1 << 20, 'a');
  std::string body = "--b\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\n" + payload + "\r\n--b--";
  Collector collector;
  MultipartParser parser("b", collector.callbacks());
  const size_t chunk = 4096;
  for (size_t i = 0; i < body.size(); i += chunk) {
    parser.feed(body.data() + i, std::min(chunk, body.size() - i));
  }
  CHECK(parser.finish());
  REQUIRE(collector.parts.size() == 1);
  CHECK(collector.parts[0].data == payload);
  CHECK(collector.data_calls >= payload.size() / chunk);
}

TEST_CASE("multipart: body starting directly with the boundary, closing without CRLF") {
  Collector collector;
  MultipartParser parser("abc", collector.callbacks());
  CHECK(parser.feed("--abc\r\nContent-Disposition: form-data; name=a\r\n\r\nhello\r\n--abc--"));
  CHECK(parser.finish());
  REQUIRE(collector.parts.size() == 1);
  CHECK(collector.parts[0].name == "a");
  CHECK(collector.parts[0].data == "hello");
}

TEST_CASE("multipart: zero parts") {
  Collector collector;
  MultipartParser parser("abc", collector.callbacks());
  CHECK(parser.feed("--abc--\r\n"));
  CHECK(parser.finish());
  CHECK(collector.parts.empty());
}

TEST_CASE("multipart: RFC 5987 filename* wins over filename") {
  Collector collector;
  MultipartParser parser("b", collector.callbacks());
  CHECK(parser.feed("--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"fallback.txt\"; "
                    "filename*=UTF-8''%E6%B5%8B%20x.txt\r\n\r\n\r\n--b--"));
  CHECK(parser.finish());
  REQUIRE(collector.parts.size() == 1);
  CHECK(collector.parts[0].filename == std::string("\xE6\xB5\x8B x.txt"));
}

TEST_CASE("multipart: truncated body") {
  const std::string body = sample_body();
  const size_t closing = body.find("\r\n--" + kBoundary + "--");
  for (size_t cut : {body.find("{\"path") + 3, body.size() / 2, closing, closing + 5}) {
    Collector collector;
    MultipartParser parser(kBoundary, collector.callbacks());
    CHECK(parser.feed(body.data(), cut));
    CHECK_FALSE(parser.finish());
    CHECK(parser.error() == MultipartError::truncated);
    // The part that was open when the body ended never gets on_part_end.
    REQUIRE(!collector.parts.empty());
    CHECK_FALSE(collector.parts.back().ended);
  }
}

TEST_CASE("multipart: wrong boundary / garbage") {
  SUBCASE("cut inside the first delimiter") {
    Collector collector;
    MultipartParser parser(kBoundary, collector.callbacks());
    CHECK(parser.feed(sample_body().substr(0, 30)));
    CHECK_FALSE(parser.finish());
    CHECK(parser.error() == MultipartError::no_boundary_found);
  }
  SUBCASE("short garbage is detected at finish") {
    Collector collector;
    MultipartParser parser("other", collector.callbacks());
    CHECK(parser.feed(sample_body()));
    CHECK_FALSE(parser.finish());
    CHECK(parser.error() == MultipartError::no_boundary_found);
    CHECK(collector.parts.empty());
  }
  SUBCASE("long garbage fails early") {
    Collector collector;
    MultipartParser parser("other", collector.callbacks());
    std::string garbage(MultipartParser::kMaxPreambleBytes + 10, 'g');
    CHECK_FALSE(parser.feed(garbage));
    CHECK(parser.failed());
    CHECK(parser.error() == MultipartError::no_boundary_found);
    CHECK_FALSE(parser.feed("--other\r\n"));  // stays failed
  }
}

TEST_CASE("multipart: header limit and malformed headers") {
  SUBCASE("too large") {
    Collector collector;
    MultipartParser parser("b", collector.callbacks(), 64);
    std::string body = "--b\r\nX-Long: " + std::string(100, 'v') + "\r\n\r\ndata\r\n--b--";
    CHECK_FALSE(parser.feed(body));
    CHECK(parser.error() == MultipartError::header_too_large);
    CHECK(collector.parts.empty());
  }
  SUBCASE("line without colon") {
    Collector collector;
    MultipartParser parser("b", collector.callbacks());
    CHECK_FALSE(parser.feed("--b\r\nnot a header\r\n\r\ndata\r\n--b--"));
    CHECK(parser.error() == MultipartError::malformed_header);
  }
}

TEST_CASE("multipart: boundary_from_content_type") {
  CHECK(boundary_from_content_type("multipart/form-data; boundary=abc").boundary == "abc");
  CHECK(boundary_from_content_type("Multipart/Form-Data;charset=utf-8;  BOUNDARY=\"a b;c\"").boundary ==
        "a b;c");
  CHECK(boundary_from_content_type("multipart/mixed; boundary=\"q\\\"x\"").boundary == "q\"x");
  auto not_multipart = boundary_from_content_type("application/json; boundary=abc");
  CHECK_FALSE(not_multipart.boundary);
  CHECK_FALSE(not_multipart.error.empty());
  CHECK_FALSE(boundary_from_content_type("multipart/form-data").boundary);
  CHECK_FALSE(boundary_from_content_type("multipart/form-data; boundary=\"\"").boundary);
  CHECK_FALSE(boundary_from_content_type("multipart/form-data; boundary=" + std::string(201, 'x')).boundary);
}

TEST_CASE("multipart: parse_header_value") {
  auto v = parse_header_value("form-data; name=\"a\\b\"; filename=C:\\dir\\f.txt ; flag; x=\"unterminated");
  CHECK(v.value == "form-data");
  REQUIRE(v.param("name"));
  CHECK(*v.param("name") == "a\\b");  // backslash before an ordinary char is kept
  REQUIRE(v.param("filename"));
  CHECK(*v.param("filename") == "C:\\dir\\f.txt");
  CHECK(v.param("flag") == nullptr);
  REQUIRE(v.param("x"));
  CHECK(*v.param("x") == "unterminated");
}
