// tests/unit/test_line_range.cc — GET /files/download?offset=&limit=: query
// validation and the incremental line reader (fs/line_range).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "fs/line_range.h"
#include "fs/ops.h"

using namespace execd::fs;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char pattern[] = "/tmp/execd-lines-test-XXXXXX";
    REQUIRE(mkdtemp(pattern) != nullptr);
    path = pattern;
  }
  ~TempDir() { (void)remove_tree(path); }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

void write_file(const std::string& path, const std::string& content) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    REQUIRE(n > 0);
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

// What upstream's serveLineRange writes, computed the obvious way.
std::string reference(const std::string& data, uint64_t offset, uint64_t limit) {
  std::string out;
  uint64_t line_no = 0, written = 0;
  size_t pos = 0;
  while (pos < data.size()) {
    size_t nl = data.find('\n', pos);
    size_t end = nl == std::string::npos ? data.size() : nl + 1;
    std::string line = data.substr(pos, end - pos);
    pos = end;
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    ++line_no;
    if (line_no < offset) continue;
    if (written > 0) out += '\n';
    out += line;
    ++written;
    if (limit != 0 && written >= limit) break;
  }
  return out;
}

std::string read_lines(const std::string& path, uint64_t offset, uint64_t limit, size_t block = 0,
                       size_t chunk = 64 * 1024) {
  LineRangeReader reader;
  REQUIRE(reader.open(path, offset, limit, block).ok());
  auto body = reader.read_all(chunk);
  REQUIRE(body.ok());
  CHECK(reader.done());
  return body.value();
}

}  // namespace

TEST_CASE("LineRangeReader: upstream line semantics") {
  TempDir dir;
  auto check = [&](const std::string& content, uint64_t offset, uint64_t limit, const std::string& expected) {
    write_file(dir / "f", content);
    CAPTURE(content);
    CAPTURE(offset);
    CAPTURE(limit);
    CHECK(reference(content, offset, limit) == expected);
    CHECK(read_lines(dir / "f", offset, limit) == expected);
    CHECK(read_lines(dir / "f", offset, limit, 1, 1) == expected);
    CHECK(read_lines(dir / "f", offset, limit, 3, 2) == expected);
  };
  check("a\nb\nc\nd\n", 2, 2, "b\nc");
  check("a\nb\nc\nd\n", 1, 0, "a\nb\nc\nd");       // no trailing newline
  check("a\nb\nc\nd", 3, 0, "c\nd");               // last line without newline
  check("a\nb\n", 3, 0, "");                       // offset past the end
  check("a\nb\n", 99, 5, "");
  check("", 1, 0, "");                             // empty file: no lines
  check("\n", 1, 0, "");                           // one empty line
  check("\n\n\nx\n", 2, 0, "\n\nx");               // empty lines are counted and kept
  check("a\r\nb\r\n", 1, 0, "a\nb");               // CRLF
  check("a\r\r\nb\r", 1, 0, "a\nb");               // every trailing CR goes
  check("a\rb\r\nc", 1, 0, "a\rb\nc");             // inner CR stays
  check("\r\n\r\nz", 1, 2, "\n");                  // lines that are only CR are empty lines
  check("x\n\r", 2, 0, "");                        // a final lone CR is a (empty) line
  check("x\n\r", 1, 0, "x\n");
  check("one\ntwo\nthree", 2, 1, "two");
}

TEST_CASE("LineRangeReader: random content against the reference") {
  TempDir dir;
  std::mt19937 rng(12345);
  const char alphabet[] = {'a', 'b', '\r', '\n', '\n', 'x', '\r'};
  for (int round = 0; round < 300; ++round) {
    std::string content(rng() % 120, '\0');
    for (char& c : content) c = alphabet[rng() % sizeof(alphabet)];
    uint64_t offset = 1 + rng() % 12;
    uint64_t limit = rng() % 6;
    size_t block = 1 + rng() % 9;
    size_t chunk = 1 + rng() % 7;
    write_file(dir / "r", content);
    CAPTURE(content);
    CAPTURE(offset);
    CAPTURE(limit);
    CAPTURE(block);
    CAPTURE(chunk);
    CHECK(read_lines(dir / "r", offset, limit, block, chunk) == reference(content, offset, limit));
  }
}

TEST_CASE("LineRangeReader: lines longer than the block size") {
  TempDir dir;
  std::string long_line(1000, 'L');
  long_line[500] = '\r';  // an inner CR in the middle of a block run
  std::string content = "short\n" + long_line + "\r\r\r\nafter\n" + std::string(300, 'M');
  write_file(dir / "f", content);
  CHECK(read_lines(dir / "f", 2, 1, 16, 7) == long_line);
  CHECK(read_lines(dir / "f", 1, 0, 16, 5) == reference(content, 1, 0));
  CHECK(read_lines(dir / "f", 4, 0, 16, 64) == std::string(300, 'M'));

  SUBCASE("memory stays one block: a 32 MiB line streams through 4 KiB blocks") {
    std::string big(32u << 20, 'B');
    write_file(dir / "big", "first\n" + big + "\nlast");
    LineRangeReader reader;
    REQUIRE(reader.open(dir / "big", 2, 1, 4096).ok());
    std::vector<char> buf(1000);
    uint64_t total = 0;
    for (;;) {
      auto got = reader.next_chunk(buf.data(), buf.size());
      REQUIRE(got.ok());
      if (got.value() == 0) break;
      CHECK(got.value() <= buf.size());
      total += got.value();
    }
    CHECK(total == big.size());
    // It stopped right after the line: "last" is in the same block, but no
    // block past the newline's was read.
    CHECK(reader.bytes_read() <= 6 + big.size() + 1 + 4096);
  }
}

TEST_CASE("LineRangeReader: a 10 GiB sparse file, line 2 is instant") {
  TempDir dir;
  std::string path = dir / "sparse";
  write_file(path, "line one\nline two\nline three\n");
  REQUIRE(truncate(path.c_str(), 10ll << 30) == 0);
  auto start = std::chrono::steady_clock::now();
  LineRangeReader reader;
  REQUIRE(reader.open(path, 2, 1).ok());
  auto body = reader.read_all();
  auto elapsed = std::chrono::steady_clock::now() - start;
  REQUIRE(body.ok());
  CHECK(body.value() == "line two");
  CHECK(reader.bytes_read() <= LineRangeReader::kDefaultBlockSize);
  CHECK(elapsed < std::chrono::milliseconds(500));
}

TEST_CASE("LineRangeReader: open errors") {
  TempDir dir;
  LineRangeReader reader;
  auto missing = reader.open(dir / "nope", 1, 0);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().kind == ErrorKind::not_found);
  CHECK(missing.error().message == "file not found: " + (dir / "nope"));
  auto directory = reader.open(dir.path, 1, 0);
  REQUIRE_FALSE(directory.ok());
  CHECK(directory.error().kind == ErrorKind::bad_request);
  CHECK(directory.error().message == "path is a directory: " + dir.path);
  REQUIRE(mkfifo((dir / "fifo").c_str(), 0600) == 0);
  auto fifo = reader.open(dir / "fifo", 1, 0);  // must not block
  REQUIRE_FALSE(fifo.ok());
  CHECK(fifo.error().message == "path is not a regular file: " + (dir / "fifo"));
}
