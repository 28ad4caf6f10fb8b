// Unit tests for execd/api/file_appender on a real libuv loop: the file is
// created by the first write, bytes land in order while writes are out, and
// a failed write says why and drops what waited.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>
#include <uv.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "execd/api/file_appender.h"
#include "fs/small_file.h"
#include "loop_scratch.h"

using execd::api::FileAppender;

TEST_CASE_FIXTURE(LoopScratch, "file appender: creates the file, writes in order, one write out at a time") {
  FileAppender a;
  int fd = -1, writes = 0;
  std::string expected;
  std::function<void()> pump;
  pump = [&] {
    a.write_next(&loop, fd, path.c_str(), [&](const FileAppender::Outcome& o) {
      CHECK(o.err == 0);
      fd = o.fd;
      ++writes;
      pump();
    });
  };
  for (int i = 0; i < 200; ++i) {
    std::string piece(1000 + i, static_cast<char>('a' + i % 26));
    expected += piece;
    a.append(piece.data(), piece.size());
    pump();  // refused while a write is out: the bytes wait for the next one
    if (i % 50 == 0) uv_run(&loop, UV_RUN_NOWAIT);
  }
  run_until([&] { return a.idle(); });
  REQUIRE(a.idle());
  CHECK(writes < 200);  // batched
  CHECK(a.durable() == expected.size());
  CHECK(execd::fs::read_small_file(path).value_or("") == expected);
  a.release_buffers();
  CHECK(a.buffer_capacity() < 64);
  close(fd);
}

TEST_CASE_FIXTURE(LoopScratch, "file appender: a failed write reports errno and drops what waited") {
  int ro = open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(ro >= 0);
  FileAppender a;
  a.append("abc", 3);
  int err = -1;
  CHECK(a.write_next(&loop, ro, nullptr, [&](const FileAppender::Outcome& o) { err = o.err; }));
  a.append("def", 3);  // waits behind the write that will fail
  CHECK_FALSE(a.write_next(&loop, ro, nullptr, [](const FileAppender::Outcome&) {}));
  run_until([&] { return err >= 0; });
  CHECK(err == EBADF);
  CHECK(a.durable() == 0);
  CHECK(a.idle());
  CHECK(a.waiting() == 0);
  close(ro);
}
