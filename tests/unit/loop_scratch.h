// A real libuv loop and a scratch directory, for the unit tests of what does
// its file I/O on libuv's threadpool (output log, file appender, spill file).
// At the end the loop is run dry and must close, and the directory goes
// (with `path` in it, if the test made that file).
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>
#include <uv.h>

#include <cstdlib>
#include <string>

struct LoopScratch {
  uv_loop_t loop;
  std::string dir, path;
  LoopScratch() {
    uv_loop_init(&loop);
    char tmpl[] = "/tmp/execd-unit-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    path = dir + "/f";
  }
  ~LoopScratch() {
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK(uv_loop_close(&loop) == 0);
    unlink(path.c_str());
    rmdir(dir.c_str());
  }
  template <class Pred>
  void run_until(Pred done) {
    for (int i = 0; i < 100000 && !done(); ++i) uv_run(&loop, UV_RUN_ONCE);
  }
};
