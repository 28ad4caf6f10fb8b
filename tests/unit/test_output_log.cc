// Unit tests for execd/exec/output_log on a real libuv loop (its writes and
// reads go through the threadpool): bytes read back in order across
// segments, only the newest kept, a drop guard that holds segments a reader
// still needs, a failing disk that stores nothing it cannot, and a log that
// has caught up with the disk holding no descriptor and no buffer.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "execd/exec/output_log.h"
#include "execd/exec/state_budget.h"
#include "loop_scratch.h"

using execd::exec::OutputLog;
using execd::exec::StateBudget;

namespace {

std::string pattern(size_t n, size_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (seed + i) % 26);
  return s;
}

void append(OutputLog& log, uint8_t channel, const std::string& s) {
  log.append(channel, reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

std::string read_all(LoopScratch& l, OutputLog& log, uint64_t from, size_t max = 1 << 30) {
  std::string got;
  bool done = false;
  log.read(from, max, [&](int err, std::string data) {
    CHECK(err == 0);
    got = std::move(data);
    done = true;
  });
  l.run_until([&] { return done; });
  REQUIRE(done);
  return got;
}

size_t files_in(const std::string& dir) {
  size_t n = 0;
  std::string cmd;
  for (const char* ext : {".output", ".index"})
    for (int k = -1; k < 64; ++k) {
      struct stat st {};
      std::string p = dir + "/f" + ext + (k < 0 ? "" : "." + std::to_string(k));
      n += stat(p.c_str(), &st) == 0;
    }
  return n;
}

}  // namespace

TEST_CASE_FIXTURE(LoopScratch, "output log: written in order, read across segments, then no buffer kept") {
  {
    OutputLog log(&loop, path, 64 << 20);
    std::string expected;
    // Several batches: appends while a write is in flight wait in memory.
    for (int round = 0; round < 4; ++round) {
      for (int i = 0; i < 64; ++i) {
        std::string piece = pattern(16 * 1024 + i, round * 64 + i);
        expected += piece;
        append(log, i % 2, piece);
      }
      uv_run(&loop, UV_RUN_NOWAIT);
    }
    CHECK(log.buffer_capacity() >= 16 * 1024);
    CHECK(read_all(*this, log, 0) == expected);  // waits for every byte offered before it
    CHECK(log.index().end() == expected.size());
    CHECK(log.index().stored(0) + log.index().stored(1) == expected.size());
    log.seal();
    run_until([&] { return log.settled(); });
    CHECK(log.settled());
    CHECK_FALSE(log.holds_descriptor());
    CHECK(log.buffer_capacity() == 0);
    CHECK(read_all(*this, log, 1000) == expected.substr(1000));
    log.remove();
    run_until([&] { return !log.busy(); });
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK(files_in(dir) == 0);
}

TEST_CASE_FIXTURE(LoopScratch, "output log: a streaming writer keeps its buffers when it catches up, a quiet one not") {
  OutputLog log(&loop, path, 64 << 20);
  // A large write (streaming): caught up, the buffers stay for the next one.
  append(log, 0, pattern(256 * 1024, 1));
  run_until([&] { return !log.busy(); });
  CHECK(log.buffer_capacity() >= 256 * 1024);
  // Then small ones: once the last two writes are small, caught up, they go.
  append(log, 0, pattern(100, 2));
  run_until([&] { return !log.busy(); });
  append(log, 0, pattern(100, 3));  // written after the small write completed
  run_until([&] { return !log.busy(); });
  CHECK(log.buffer_capacity() < 4096);
  // A stream the disk takes in 32 KiB writes is streaming too.
  for (int i = 0; i < 3; ++i) {
    append(log, 0, pattern(32 * 1024, 4 + i));
    run_until([&] { return !log.busy(); });
  }
  CHECK(log.buffer_capacity() >= 64 * 1024);
  log.seal();
  run_until([&] { return log.settled(); });
  CHECK(log.buffer_capacity() == 0);
  log.remove();
  run_until([&] { return !log.busy(); });
}

TEST_CASE_FIXTURE(LoopScratch, "output log: the newest bytes are kept, in segments of a quarter of the limit") {
  OutputLog log(&loop, path, 4000);
  std::string all;
  for (int i = 0; i < 50; ++i) {
    std::string piece = pattern(700, i);
    all += piece;
    append(log, 0, piece);
  }
  CHECK(log.end() == all.size());
  CHECK(log.end() - log.first() <= 4000);
  CHECK(log.end() - log.first() >= 3000);
  CHECK(log.index().start(0) == log.first());
  CHECK(read_all(*this, log, log.first()) == all.substr(log.first()));
  // Before the first retained byte there is nothing to read.
  CHECK(read_all(*this, log, 0).empty());
  log.seal();
  run_until([&] { return log.settled(); });
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK(files_in(dir) <= 2 * 5);  // 4 or 5 segments, each a data and an index file
  // Restart: the segments left behind are read back.
  std::vector<std::string> names;
  for (int k = -1; k < 64; ++k) {
    std::string stem = std::string("f.output") + (k < 0 ? "" : "." + std::to_string(k));
    struct stat st {};
    if (stat((dir + "/" + stem).c_str(), &st) == 0) names.push_back(stem);
  }
  OutputLog again(&loop, path, 4000);
  REQUIRE(again.adopt(names));
  CHECK(again.first() == log.first());
  CHECK(again.end() == log.end());
  CHECK(read_all(*this, again, again.first()) == all.substr(again.first()));
  log.remove();
  run_until([&] { return !log.busy(); });
}

TEST_CASE_FIXTURE(LoopScratch, "output log: a dropped segment's file is overwritten by the next, its old tail cut") {
  OutputLog log(&loop, path, 4000);  // segments of 1000 bytes
  std::string all;
  // A file is known by its inode and birth time (a new file may get an
  // unlinked one's inode number, not its birth time).
  std::set<std::pair<uint64_t, int64_t>> files;
  size_t files_made = 0;
  bool birth_times = true;
  for (int i = 0; i < 40; ++i) {
    std::string piece = pattern(i % 7 == 6 ? 180 : 500, i);  // segments that do not end on a piece
    all += piece;
    append(log, i % 2, piece);
    run_until([&] { return !log.busy(); });  // each write lands before the next drop
    for (int k = 0; k < 64; ++k) {
      struct statx stx {};
      if (statx(AT_FDCWD, (dir + "/f.output." + std::to_string(k)).c_str(), 0, STATX_INO | STATX_BTIME, &stx) != 0)
        continue;
      birth_times = birth_times && (stx.stx_mask & STATX_BTIME);
      int64_t born = static_cast<int64_t>(stx.stx_btime.tv_sec) * 1000000000 + stx.stx_btime.tv_nsec;
      files_made += files.insert({stx.stx_ino, born}).second;
    }
  }
  CHECK(log.end() - log.first() <= 4000);
  CHECK(read_all(*this, log, log.first()) == all.substr(log.first()));
  // A read out while its segment goes finds the old bytes or none, never the
  // new ones written over a reused file.
  uint64_t old_first = log.first();
  std::string got;
  bool done = false;
  log.read(old_first, 1 << 20, [&](int err, std::string data) {
    CHECK(err == 0);
    got = std::move(data);
    done = true;
  });
  for (int i = 0; i < 8; ++i) {
    std::string piece = pattern(500, 100 + i);
    all += piece;
    append(log, 0, piece);
  }
  run_until([&] { return done; });
  CHECK(all.compare(old_first, got.size(), got) == 0);
  log.seal();
  run_until([&] { return log.settled(); });
  uv_run(&loop, UV_RUN_DEFAULT);
  // Dozens of segments, a handful of files: each dropped one's was taken over.
  if (birth_times) CHECK(files_made <= 6);
  // What is on disk is the retained bytes exactly (no old tails), and a
  // restart reads them back.
  std::vector<std::string> names;
  uint64_t on_disk = 0;
  for (int k = -1; k < 64; ++k) {
    std::string stem = std::string("f.output") + (k < 0 ? "" : "." + std::to_string(k));
    struct stat st {};
    if (stat((dir + "/" + stem).c_str(), &st) == 0) {
      names.push_back(stem);
      on_disk += static_cast<uint64_t>(st.st_size);
    }
  }
  CHECK(on_disk == log.end() - log.first());
  OutputLog again(&loop, path, 4000);
  REQUIRE(again.adopt(names));
  CHECK(again.first() == log.first());
  CHECK(read_all(*this, again, again.first()) == all.substr(again.first()));
  log.remove();
  run_until([&] { return !log.busy(); });
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK(files_in(dir) == 0);
}

TEST_CASE_FIXTURE(LoopScratch, "output log: a restart does not adopt a data file without its index (a kept segment)") {
  OutputLog log(&loop, path, 4000);
  // A reader holds every segment until trim() lets them go, so the first
  // dropped one's file waits for a next segment that does not come.
  uint64_t reader_at = 0;
  log.set_drop_guard([&](uint64_t upto) { return reader_at >= upto; });
  std::string all;
  for (int i = 0; i < 12; ++i) {
    std::string piece = pattern(500, i);
    all += piece;
    append(log, 0, piece);
    run_until([&] { return !log.busy(); });
  }
  reader_at = all.size();
  log.trim();
  uv_run(&loop, UV_RUN_DEFAULT);
  // As a crash would leave it: the segments, and a dropped one's data file
  // kept for reuse (its index unlinked).
  std::vector<std::string> names;
  size_t data_files = 0, index_files = 0;
  for (int k = -1; k < 64; ++k) {
    std::string suffix = k < 0 ? "" : "." + std::to_string(k);
    struct stat st {};
    if (stat((dir + "/f.output" + suffix).c_str(), &st) == 0) {
      names.push_back("f.output" + suffix);
      ++data_files;
    }
    index_files += stat((dir + "/f.index" + suffix).c_str(), &st) == 0;
  }
  CHECK(data_files == index_files + 1);
  OutputLog again(&loop, path, 4000);
  REQUIRE(again.adopt(names));
  CHECK(again.first() == log.first());
  CHECK(again.end() == log.end());
  CHECK(read_all(*this, again, again.first()) == all.substr(again.first()));
  CHECK(files_in(dir) == 2 * index_files);  // the kept file was let go
  log.remove();
  run_until([&] { return !log.busy(); });
}

TEST_CASE_FIXTURE(LoopScratch, "output log: bytes read into room() are taken where they lie, only while streaming") {
  OutputLog log(&loop, path, 4 << 20);  // segments of 1 MiB
  CHECK(log.room().data() == nullptr);    // nothing written yet: quiet
  std::string all;
  for (int i = 0; i < 3; ++i) {  // a stream: large writes
    std::string piece = pattern(100 * 1024, i);
    all += piece;
    append(log, 0, piece);
    run_until([&] { return !log.busy(); });
  }
  // Room in place, never past the open segment (1 MiB, 300 KiB of it used).
  size_t placed = 0;
  for (int i = 0; i < 12; ++i) {
    std::span<uint8_t> room = log.room();
    if (!room.data()) break;
    CHECK(room.size() >= OutputLog::kMinRoom);
    CHECK(room.size() <= OutputLog::kRoomBytes);
    CHECK(log.end() + room.size() <= (log.end() / (1 << 20) + 1) * (1 << 20));
    std::string piece = pattern(std::min<size_t>(room.size(), 70000), 10 + i);
    std::memcpy(room.data(), piece.data(), piece.size());  // as a read would
    log.append(i % 2, room.data(), piece.size());
    all += piece;
    ++placed;
    if (i % 3 == 0) run_until([&] { return !log.busy(); });
  }
  CHECK(placed >= 8);
  // Bytes that are not in the room are copied as before.
  std::string tail = pattern(5000, 99);
  all += tail;
  append(log, 1, tail);
  CHECK(read_all(*this, log, 0) == all);
  CHECK(log.index().stored(0) + log.index().stored(1) == all.size());
  log.seal();
  CHECK(log.room().data() == nullptr);
  run_until([&] { return log.settled(); });
  CHECK(read_all(*this, log, 0) == all);
  log.remove();
  run_until([&] { return !log.busy(); });
}

namespace {
uint64_t file_size(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}
}  // namespace

TEST_CASE_FIXTURE(LoopScratch, "output log: a few bytes wait for the delay; a read, a batch, the seal, a close do not") {
  execd::exec::WriteDelay delay(&loop, 60 * 1000);  // never runs out here
  {
    OutputLog log(&loop, path, 64 << 20, &delay);
    std::string all = pattern(100, 1);
    append(log, 0, all);  // the first write makes the files: at once
    run_until([&] { return !log.busy(); });
    CHECK(file_size(path + ".output") == 100);
    std::string more = pattern(200, 2);
    all += more;
    append(log, 1, more);
    for (int i = 0; i < 10; ++i) uv_run(&loop, UV_RUN_NOWAIT);
    CHECK_FALSE(log.busy());
    CHECK(file_size(path + ".output") == 100);  // waiting for the delay
    CHECK(read_all(*this, log, 0) == all);     // a read does not wait for it
    CHECK(file_size(path + ".output") == 300);
    std::string batch = pattern(OutputLog::kWriteBatch, 3);
    all += pattern(50, 4) + batch;
    append(log, 0, pattern(50, 4));
    append(log, 0, batch);  // a batch's worth waits for nothing
    run_until([&] { return !log.busy(); });
    CHECK(file_size(path + ".output") == all.size());
    std::string tail = pattern(70, 5);
    all += tail;
    append(log, 1, tail);
    uv_run(&loop, UV_RUN_NOWAIT);
    CHECK(file_size(path + ".output") == all.size() - 70);
    log.seal();  // the seal does not wait either
    run_until([&] { return log.settled(); });
    CHECK(file_size(path + ".output") == all.size());
    CHECK(read_all(*this, log, 0) == all);
    log.remove();
    run_until([&] { return !log.busy(); });
  }
  {
    // The delay's close writes what waits, and later writes go at once.
    // (Another name: the first log's files are unlinked from the pool.)
    std::string path2 = path + "-2";
    OutputLog log(&loop, path2, 64 << 20, &delay);
    append(log, 0, pattern(10, 6));
    run_until([&] { return !log.busy(); });
    append(log, 0, pattern(10, 7));
    uv_run(&loop, UV_RUN_NOWAIT);
    CHECK(file_size(path2 + ".output") == 10);
    delay.close();
    run_until([&] { return !log.busy(); });
    CHECK(file_size(path2 + ".output") == 20);
    append(log, 0, pattern(10, 8));
    run_until([&] { return !log.busy(); });
    CHECK(file_size(path2 + ".output") == 30);
    log.remove();
    run_until([&] { return !log.busy(); });
  }
  uv_run(&loop, UV_RUN_DEFAULT);  // the delay's timer is closed before it goes
}

TEST_CASE_FIXTURE(LoopScratch, "output log: the delay runs out and writes; a log that goes first leaves it") {
  execd::exec::WriteDelay delay(&loop, 1);
  {
    OutputLog log(&loop, path, 64 << 20, &delay);
    append(log, 0, pattern(10, 1));
    run_until([&] { return !log.busy(); });
    append(log, 0, pattern(10, 2));
    run_until([&] { return file_size(path + ".output") == 20; });
    CHECK(file_size(path + ".output") == 20);
    append(log, 0, pattern(10, 3));  // delayed, and then the log goes
    log.remove();
    run_until([&] { return !log.busy(); });
  }
  // The timer runs out with nothing left to write (ASan: nothing freed is touched).
  uv_timer_t wait;
  uv_timer_init(&loop, &wait);
  bool waited = false;
  wait.data = &waited;
  uv_timer_start(&wait, [](uv_timer_t* t) { *static_cast<bool*>(t->data) = true; }, 5, 0);
  run_until([&] { return waited; });
  uv_close(reinterpret_cast<uv_handle_t*>(&wait), nullptr);
  delay.close();
  uv_run(&loop, UV_RUN_DEFAULT);  // the handles are closed before they go
}

TEST_CASE_FIXTURE(LoopScratch, "output log: a drop guard keeps what a reader needs; trim() lets it go later") {
  OutputLog log(&loop, path, 1000);
  uint64_t reader_at = 0;
  log.set_drop_guard([&](uint64_t upto) { return reader_at >= upto; });
  for (int i = 0; i < 10; ++i) append(log, 1, pattern(250, i));
  CHECK(log.first() == 0);  // the reader at 0 needs everything
  CHECK(log.over_limit());
  reader_at = 2000;
  log.trim();
  CHECK_FALSE(log.over_limit());
  CHECK(log.first() >= 1500);
  CHECK(log.first() <= 2000);
  log.remove();
  run_until([&] { return !log.busy(); });
}

TEST_CASE_FIXTURE(LoopScratch, "output log: a write that fails stores nothing from there on") {
  // A base path in a directory that does not exist: the first write fails.
  OutputLog log(&loop, dir + "/missing/f", 1 << 20);
  bool written = false;
  log.set_on_written([&] { written = true; });
  append(log, 0, "hello");
  run_until([&] { return written; });
  CHECK(log.failed());
  CHECK(log.failed_at() == 0);
  CHECK(log.end() == 0);  // the index no longer claims the bytes
  append(log, 0, "more");  // not stored either
  CHECK(log.end() == 0);
  CHECK(read_all(*this, log, 0).empty());
  log.remove();
  run_until([&] { return !log.busy(); });
}

TEST_CASE_FIXTURE(LoopScratch, "state budget: the smallest bound wins, and room is asked for once") {
  StateBudget budget({.dir = dir, .cap_bytes = 8 << 20, .share_percent = 100, .journal_max_bytes = 0});
  CHECK(budget.limit() == 8u << 20);  // /tmp is larger than 8 MiB
  CHECK(budget.output_limit() == 8u << 20);
  CHECK(budget.segment_bytes(64 << 20) == (8u << 20) / StateBudget::kSegmentShare);
  CHECK(budget.segment_bytes(256 << 10) == 64u << 10);  // a quarter of a small log limit
  std::vector<uint64_t> asked;
  budget.make_room = [&](uint64_t n) {
    asked.push_back(n);
    budget.need(1 << 30);  // not re-entered
  };
  budget.add_output(7 << 20);
  budget.need(1 << 20);
  CHECK(asked.empty());
  budget.need((1 << 20) + 5);
  REQUIRE(asked.size() == 1);
  CHECK(asked[0] == 5);
  budget.add_output(-(8 << 20));  // never below nothing
  CHECK(budget.output_bytes() == 0);
  // The journal's reserve comes off output's share.
  StateBudget with_journal({.dir = dir, .cap_bytes = 8 << 20, .share_percent = 100, .journal_max_bytes = 16 << 20});
  CHECK(with_journal.output_limit() == (8u << 20) - (8u << 20) / StateBudget::kJournalShare);
}

TEST_CASE_FIXTURE(LoopScratch, "output log: its bytes count against the budget, and shed or evicted ones come off") {
  StateBudget budget({.dir = dir, .cap_bytes = 64 << 20, .share_percent = 100, .journal_max_bytes = 0});
  OutputLog log(&loop, dir + "/f", 1 << 20);
  log.set_budget(&budget);  // segments of 64 KiB (the budget's 64th is 1 MiB, a quarter of the limit 256 KiB)
  for (int i = 0; i < 8; ++i) append(log, 0, pattern(50000, i));
  CHECK(budget.output_bytes() == log.disk_bytes());
  CHECK(log.disk_bytes() >= 400000);
  uint64_t before = log.disk_bytes();
  std::optional<uint64_t> upto = log.oldest_segment_end();
  REQUIRE(upto);
  uint64_t freed = log.shed_oldest();
  CHECK(freed > 0);
  CHECK(log.first() == *upto);
  CHECK(budget.output_bytes() == before - freed);
  log.seal();
  run_until([&] { return log.settled(); });
  uint64_t end = log.end();
  CHECK(read_all(*this, log, log.first()).size() == end - log.first());
  CHECK(log.evict() > 0);
  CHECK(budget.output_bytes() == 0);
  CHECK(log.first() == end);  // every offset stays; reads before it find nothing
  CHECK(log.index().start(0) == end);
  CHECK(read_all(*this, log, 0).empty());
  run_until([&] { return !log.busy(); });
  // Its files went with it.
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK(files_in(dir) == 0);
  log.remove();
  run_until([&] { return !log.busy(); });
}

TEST_CASE_FIXTURE(LoopScratch, "output log: past the budget the log asks for room before taking bytes") {
  StateBudget budget({.dir = dir, .cap_bytes = 4 << 20, .share_percent = 100, .journal_max_bytes = 0});
  OutputLog log(&loop, dir + "/f", 64 << 20);
  log.set_budget(&budget);
  // The room maker sheds this log's own oldest segments (as the registry
  // does for the running run that retains most).
  budget.make_room = [&](uint64_t n) {
    uint64_t freed = 0;
    while (freed < n) {
      uint64_t f = log.shed_oldest();
      if (f == 0) break;
      freed += f;
    }
  };
  for (int i = 0; i < 200; ++i) append(log, 0, pattern(60000, i));  // ~12 MiB
  CHECK(budget.output_bytes() <= budget.output_limit() + 2 * budget.segment_bytes(64 << 20) + (16 << 10));
  CHECK(log.first() > 0);
  CHECK(log.end() == 200u * 60000);
  std::string tail = read_all(*this, log, log.end() - 60000);
  CHECK(tail == pattern(60000, 199));
  log.remove();
  run_until([&] { return !log.busy(); });
  CHECK(budget.output_bytes() == 0);
}
