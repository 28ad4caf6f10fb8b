// tests/unit/test_gunzip.cc — gzip request bodies: members, corruption,
// truncation, the output bound, and pulling output in small pieces.
#include <doctest/doctest.h>
#include <zlib.h>

#include <string>

#include "protocol/gunzip.h"

using execd::protocol::content_coding;
using execd::protocol::ContentCoding;
using execd::protocol::Gunzip;

namespace {

// What gzip(1) and Python's gzip.compress make: one member.
std::string gzip_member(const std::string& data) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&z, data.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

struct Decoded {
  std::string data;
  bool complete = false;
  bool failed = false;
  bool too_large = false;
  std::string error;
};

// Feeds `body` `piece` bytes at a time and pulls output `room` bytes at a time.
Decoded decode(const std::string& body, size_t piece, size_t room, uint64_t max = 1ull << 40) {
  Gunzip g(max);
  Decoded d;
  std::string out(room, '\0');
  for (size_t at = 0; at <= body.size() && !g.failed();) {
    std::string_view in = std::string_view(body).substr(at, piece);
    Gunzip::Step s = g.inflate(in, out.data(), room);
    if (!g.failed()) d.data.append(out.data(), s.produced);
    at += s.consumed;
    if (s.produced < room && at == body.size()) break;  // everything taken, nothing held back
    if (s.produced == 0 && s.consumed == 0) break;        // stuck: the test fails below
  }
  d.complete = g.complete();
  d.failed = g.failed();
  d.too_large = g.too_large();
  d.error = g.error();
  return d;
}

std::string sample(size_t n) {
  std::string s;
  uint32_t x = 12345;
  while (s.size() < n) {
    x = x * 1103515245 + 12345;
    s += static_cast<char>((x >> 16) % 7 == 0 ? (x >> 8) : 'a' + (x >> 20) % 4);
  }
  return s;
}

}  // namespace

TEST_CASE("gunzip: content codings") {
  std::string gzip = "gzip", upper = " GZip ", x = "x-gzip", id = "identity", empty, br = "br", list = "gzip, gzip";
  CHECK(content_coding(nullptr) == ContentCoding::identity);
  CHECK(content_coding(&empty) == ContentCoding::identity);
  CHECK(content_coding(&id) == ContentCoding::identity);
  CHECK(content_coding(&gzip) == ContentCoding::gzip);
  CHECK(content_coding(&upper) == ContentCoding::gzip);
  CHECK(content_coding(&x) == ContentCoding::gzip);
  CHECK(content_coding(&br) == ContentCoding::unsupported);
  CHECK(content_coding(&list) == ContentCoding::unsupported);
}

TEST_CASE("gunzip: round trip whatever the input and output piece sizes") {
  std::string data = sample(300000);
  std::string body = gzip_member(data);
  for (size_t piece : {size_t(1), size_t(7), size_t(4096), body.size()})
    for (size_t room : {size_t(1), size_t(13), size_t(65536)}) {
      if (piece == 1 && room == 1) continue;  // slow, and covered by the others
      INFO("piece " << piece << " room " << room);
      Decoded d = decode(body, piece, room);
      CHECK_FALSE(d.failed);
      CHECK(d.complete);
      CHECK(d.data == data);
    }
}

TEST_CASE("gunzip: output is pulled, never more than the room given") {
  std::string body = gzip_member(std::string(8 << 20, '\0'));
  Gunzip g(1ull << 40);
  char out[4096];
  Gunzip::Step s = g.inflate(body, out, sizeof out);
  CHECK(s.produced == sizeof out);
  CHECK(s.consumed < body.size());  // the rest of the input waits for room
  CHECK_FALSE(g.complete());
  // Output stays inside zlib even with no input left: empty input drains it.
  std::string_view rest = std::string_view(body).substr(s.consumed);
  uint64_t total = s.produced;
  while (true) {
    s = g.inflate(rest, out, sizeof out);
    rest.remove_prefix(s.consumed);
    total += s.produced;
    if (s.produced < sizeof out && rest.empty()) break;
  }
  CHECK(total == (8u << 20));
  CHECK(g.complete());
}

TEST_CASE("gunzip: concatenated members decode to their concatenation") {
  std::string body = gzip_member("first\n") + gzip_member("") + gzip_member(sample(70000));
  Decoded d = decode(body, 5, 1000);
  CHECK(d.complete);
  CHECK(d.data == "first\n" + sample(70000));
}

TEST_CASE("gunzip: bytes after a member that are not a member are corrupt") {
  Decoded garbage = decode(gzip_member("data") + "trailing", 64, 64);
  CHECK(garbage.failed);
  CHECK_FALSE(garbage.complete);
  CHECK(garbage.error.find("invalid gzip data") == 0);
  CHECK(decode(gzip_member("data") + std::string(8, '\0'), 64, 64).failed);
}

TEST_CASE("gunzip: corrupt, truncated and empty bodies") {
  std::string body = gzip_member(sample(5000));
  std::string bad_crc = body;
  bad_crc[bad_crc.size() - 6] ^= 0x55;  // inside the CRC-32 of the trailer
  CHECK(decode(bad_crc, 100, 100).failed);
  std::string bad_magic = body;
  bad_magic[0] = 'x';
  CHECK(decode(bad_magic, 100, 100).failed);
  CHECK(decode("not gzip at all", 100, 100).failed);
  std::string bad_size = body;
  bad_size[bad_size.size() - 2] ^= 1;  // ISIZE
  CHECK(decode(bad_size, 100, 100).failed);

  Decoded cut = decode(body.substr(0, body.size() - 3), 100, 100);
  CHECK_FALSE(cut.failed);  // not wrong so far, only unfinished
  CHECK_FALSE(cut.complete);
  Decoded header_only = decode(body.substr(0, 5), 100, 100);
  CHECK_FALSE(header_only.complete);
  Gunzip empty(100);
  CHECK_FALSE(empty.complete());
  CHECK_FALSE(empty.failed());
}

TEST_CASE("gunzip: the output bound") {
  std::string zeros(4 << 20, '\0');
  std::string bomb = gzip_member(zeros);
  CHECK(bomb.size() < 8192);

  Decoded over = decode(bomb, 1024, 65536, 1 << 20);
  CHECK(over.failed);
  CHECK(over.too_large);
  CHECK(over.data.size() <= (1u << 20));  // nothing past the bound was handed out
  CHECK(over.error.find("more than 1048576 bytes") != std::string::npos);

  Decoded exact = decode(bomb, 1024, 65536, 4 << 20);
  CHECK_FALSE(exact.failed);
  CHECK(exact.complete);
  CHECK(exact.data.size() == (4u << 20));

  CHECK(decode(bomb, 1024, 65536, (4 << 20) - 1).too_large);
  // Members add up against the same bound.
  CHECK(decode(bomb + bomb, 1024, 65536, (6 << 20)).too_large);
}
