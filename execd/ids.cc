// execd/ids: see header.
#include "execd/ids.h"

#include <sys/random.h>

#include "protocol/sha.h"

namespace execd {

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

}  // namespace execd
