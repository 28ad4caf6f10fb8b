// Unit tests for execd/api/output_log on a real libuv loop (its writes go
// through the threadpool): the bytes read back in order, and a log that has
// caught up with the disk holding no buffer memory, since a finished record
// keeps its log for the whole retention time.
#include <doctest/doctest.h>
#include <unistd.h>
#include <uv.h>

#include <cstdlib>
#include <string>

#include "execd/api/output_log.h"
#include "loop_scratch.h"

using execd::api::OutputLog;

TEST_CASE_FIXTURE(LoopScratch, "output log: written in order, then no buffer memory kept") {
  {
    OutputLog log(&loop, path, 64 << 20);
    std::string expected;
    // Several batches: appends while a write is in flight gather in pending_.
    for (int round = 0; round < 4; ++round) {
      for (int i = 0; i < 64; ++i) {
        std::string piece(16 * 1024 + i, static_cast<char>('a' + (round * 64 + i) % 26));
        expected += piece;
        log.append(reinterpret_cast<const uint8_t*>(piece.data()), piece.size());
      }
      uv_run(&loop, UV_RUN_NOWAIT);
    }
    CHECK(log.buffer_capacity() >= 16 * 1024);
    run_until([&] { return !log.busy() && log.pending_bytes() == 0; });
    REQUIRE_FALSE(log.busy());
    CHECK(log.readable_bytes() == expected.size());
    CHECK(log.buffer_capacity() < 64);  // only what an empty std::string holds inline
    std::string got;
    bool done = false;
    log.read(0, expected.size(), [&](int err, std::string data) {
      CHECK(err == 0);
      got = std::move(data);
      done = true;
    });
    run_until([&] { return done; });
    CHECK(got == expected);
    log.remove();
    run_until([&] { return !log.busy(); });
  }
}

TEST_CASE_FIXTURE(LoopScratch, "output log: sealed, it closes its file once written, and reads still see every byte") {
  {
    OutputLog log(&loop, path, 64 << 20);
    std::string expected(300 * 1024, 'x');
    for (size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<char>('a' + i % 26);
    log.append(reinterpret_cast<const uint8_t*>(expected.data()), expected.size());
    log.seal();  // the write is still in flight: the file closes after it
    CHECK(log.busy());
    const char more[] = "after the seal";
    log.append(reinterpret_cast<const uint8_t*>(more), sizeof more - 1);  // counted, not stored
    run_until([&] { return !log.busy() && !log.holds_descriptor(); });
    CHECK_FALSE(log.holds_descriptor());
    CHECK(log.readable_bytes() == expected.size());
    CHECK(log.total_bytes() == expected.size() + sizeof more - 1);
    std::string got;
    int reads = 0;
    // Two reads at once, from the middle on: each opens and closes its own.
    for (uint64_t at : {uint64_t{0}, uint64_t{1000}})
      log.read(at, expected.size(), [&, at](int err, std::string data) {
        CHECK(err == 0);
        CHECK(data == expected.substr(at));
        ++reads;
      });
    run_until([&] { return reads == 2; });
    CHECK(reads == 2);
    CHECK_FALSE(log.holds_descriptor());
    log.remove();
    run_until([&] { return !log.busy(); });
  }
}
