// execd/context: see header.
#include "execd/context.h"

#include <sys/random.h>

#include <cstdio>
#include <ctime>

namespace execd {

int64_t unix_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t unix_ms() { return unix_ns() / 1000000; }

std::string rfc3339_nano(int64_t ns) {
  time_t secs = static_cast<time_t>(ns / 1000000000);
  long frac = static_cast<long>(ns % 1000000000);
  struct tm tm;
  localtime_r(&secs, &tm);
  char buf[64];
  size_t n = strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::string out(buf, n);
  if (frac) {
    // Go trims trailing zeros of the fraction.
    char f[16];
    snprintf(f, sizeof f, ".%09ld", frac);
    std::string fs(f);
    while (fs.back() == '0') fs.pop_back();
    out += fs;
  }
  long off = tm.tm_gmtoff;
  if (off == 0) {
    out += 'Z';
  } else {
    char z[32];
    snprintf(z, sizeof z, "%c%02ld:%02ld", off < 0 ? '-' : '+', labs(off) / 3600, (labs(off) % 3600) / 60);
    out += z;
  }
  return out;
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
  static const char k[] = "0123456789abcdef";
  std::string s(32, '0');
  for (int i = 0; i < 16; ++i) {
    s[2 * i] = k[b[i] >> 4];
    s[2 * i + 1] = k[b[i] & 15];
  }
  return s;
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

}  // namespace execd
