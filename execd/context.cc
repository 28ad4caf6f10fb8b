// execd/context: see header.
#include "execd/context.h"

#include <sys/random.h>

#include <ctime>

#include "fs/file_info.h"
#include "protocol/sha.h"
#include "pty/spawn.h"

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

namespace {
void random_bytes(unsigned char* b, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = getrandom(b + got, n - got, 0);
    if (r > 0) got += static_cast<size_t>(r);
  }
}
}  // namespace

std::string random_id32() {
  unsigned char b[16];
  random_bytes(b, sizeof b);
  b[6] = (b[6] & 0x0F) | 0x40;
  b[8] = (b[8] & 0x3F) | 0x80;
  return protocol::lower_hex(b, sizeof b);
}

std::string random_uuid() {
  std::string h = random_id32();
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) + "-" + h.substr(20);
}

const char* env_lookup(const std::vector<std::string>& env, std::string_view name) {
  for (const auto& kv : env)
    if (kv.size() > name.size() && kv.compare(0, name.size(), name) == 0 && kv[name.size()] == '=')
      return kv.c_str() + name.size() + 1;
  return nullptr;
}

std::vector<std::string> Context::child_env() const {
  std::vector<std::string> env = base_env;
  for (const auto& [k, v] : *bound_env) pty::set_env(env, k, v);
  return env;
}

}  // namespace execd
