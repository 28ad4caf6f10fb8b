// Unit tests for execd/api/spill_file on a real libuv loop (its writes go
// through the threadpool): order and durability, the disk limit, and a spill
// whose owner lets go while a write is still in flight.
#include <doctest/doctest.h>
#include <unistd.h>
#include <uv.h>

#include <cstdlib>
#include <string>

#include "execd/api/spill_file.h"
#include "loop_scratch.h"

using execd::api::SpillFile;

namespace {

std::string read_all(const SpillFile& s) {
  std::string out(s.durable(), '\0');
  REQUIRE(pread(s.file()->fd, out.data(), out.size(), 0) == static_cast<ssize_t>(out.size()));
  return out;
}

void run_until_settled(uv_loop_t* loop, const SpillFile& s) {
  for (int i = 0; i < 100000 && !s.settled(); ++i) uv_run(loop, UV_RUN_ONCE);
  REQUIRE(s.settled());
}

}  // namespace

TEST_CASE_FIXTURE(LoopScratch, "spill file: bytes become durable in order, on_written says when") {
  std::string error;
  auto s = SpillFile::create(&loop, dir, 64 << 20, error);
  REQUIRE(s);
  int written = 0;
  s->set_on_written([&] { ++written; });
  std::string expected;
  for (int i = 0; i < 200; ++i) {
    std::string piece(1000 + i * 37, static_cast<char>('a' + i % 26));
    expected += piece;
    REQUIRE(s->append(piece.data(), piece.size(), error));
  }
  CHECK_FALSE(s->settled());
  run_until_settled(&loop, *s);
  CHECK(written >= 1);
  CHECK(s->durable() == expected.size());
  CHECK(read_all(*s) == expected);
  // Anonymous: nothing in the directory.
  CHECK(rmdir(dir.c_str()) == 0);
  s->detach();
  s.reset();
}

TEST_CASE_FIXTURE(LoopScratch, "spill file: the limit refuses whole appends and keeps what it took") {
  std::string error;
  auto s = SpillFile::create(&loop, dir, 10, error);
  REQUIRE(s);
  CHECK(s->append("0123456", 7, error));
  CHECK_FALSE(s->append("789ab", 5, error));
  CHECK(error.find("more than 10 bytes") != std::string::npos);
  CHECK(s->append("789", 3, error));
  CHECK_FALSE(s->append("x", 1, error));
  run_until_settled(&loop, *s);
  CHECK(read_all(*s) == "0123456789");
  s->detach();
  s.reset();
}

TEST_CASE_FIXTURE(LoopScratch, "spill file: the owner may go while a write is in flight") {
  std::string error;
  auto s = SpillFile::create(&loop, dir, 64 << 20, error);
  REQUIRE(s);
  bool called = false;
  s->set_on_written([&] { called = true; });
  std::string big(4 << 20, 'z');
  REQUIRE(s->append(big.data(), big.size(), error));
  REQUIRE(s->append("tail", 4, error));  // waits in memory behind the write
  s->detach();
  s.reset();  // the write in flight keeps the spill alive until it completes
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK_FALSE(called);
}

TEST_CASE_FIXTURE(LoopScratch, "spill file: a directory it cannot create in is an error, not a crash") {
  std::string error;
  CHECK_FALSE(SpillFile::create(&loop, "/nonexistent/execd-spill", 1 << 20, error));
  CHECK(error.find("cannot create a spill file") != std::string::npos);
}
