// execd/clock: see header.
#include "execd/clock.h"

#include <ctime>

#include "fs/file_info.h"

namespace execd {

int64_t unix_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t unix_ms() { return unix_ns() / 1000000; }

std::string rfc3339_nano(int64_t ns) {
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(ns / 1000000000);
  ts.tv_nsec = static_cast<long>(ns % 1000000000);
  return fs::format_rfc3339_nano(ts);
}

}  // namespace execd
