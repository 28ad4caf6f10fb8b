// execd/limits: see header.
#include "execd/limits.h"

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <string>

namespace execd {

bool admit(http::Exchange& ex, size_t in_use, size_t cap, std::string_view what, std::string_view flag) {
  if (in_use < cap) return true;
  ex.respond_error(429, "LIMIT_REACHED",
                   "at most " + std::to_string(cap) + " " + std::string(what) + " at once (--" + std::string(flag) +
                       "); delete one, or wait for one to end");
  return false;
}

size_t descriptors_open() {
  // Rare (a context, a session or a terminal is being made): a directory
  // walk of a few hundred entries.
  DIR* d = opendir("/proc/self/fd");
  if (!d) return 0;
  size_t n = 0;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n > 0 ? n - 1 : 0;  // not the walk's own descriptor
}

size_t descriptors_limit() {
  struct rlimit lim {};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return SIZE_MAX;
  return static_cast<size_t>(lim.rlim_cur);
}

bool admit_descriptors(http::Exchange& ex, size_t need, std::string_view what) {
  size_t limit = descriptors_limit();
  if (limit == SIZE_MAX) return true;
  size_t reserve = std::max<size_t>(64, limit / 8);
  size_t open = descriptors_open();
  if (open + need + reserve <= limit) return true;
  ex.respond_error(503, "OUT_OF_DESCRIPTORS",
                   std::string(what) + " needs about " + std::to_string(need) + " descriptors and only " +
                       std::to_string(limit > open ? limit - open : 0) + " of " + std::to_string(limit) +
                       " are free, " + std::to_string(reserve) + " of them kept for /ping, status and deletes");
  return false;
}

}  // namespace execd
