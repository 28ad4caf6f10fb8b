// execd/malloc_tuning: see header.
#include "execd/malloc_tuning.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace execd {

namespace {

constexpr const char* kTunables = "GLIBC_TUNABLES";
constexpr const char* kNoCaches = "glibc.malloc.tcache_count=0";
// Set only between the two starts: "<name>/-" when GLIBC_TUNABLES was
// unset, "<name>/=<value>" when it was set (a process name has no '/').
constexpr const char* kMark = "EXECD_MALLOC_TUNED";

[[maybe_unused]] void restore(const std::string& mark) {
  size_t slash = mark.find('/');
  std::string name = mark.substr(0, slash);
  std::string given = slash == std::string::npos ? "-" : mark.substr(slash + 1);
  if (!given.empty() && given[0] == '=') setenv(kTunables, given.c_str() + 1, 1);
  else unsetenv(kTunables);
  unsetenv(kMark);
  // Started through /proc/self/exe, the process is named "exe".
  if (!name.empty()) prctl(PR_SET_NAME, name.c_str(), 0, 0, 0);
}

}  // namespace

std::optional<std::string> tunables_without_malloc_caches(const char* given) {
  if (!given || !*given) return std::string(kNoCaches);
  if (strstr(given, "glibc.malloc.tcache_count")) return std::nullopt;
  return std::string(given) + ":" + kNoCaches;
}

void run_without_malloc_caches(char** argv) {
#if defined(__SANITIZE_ADDRESS__) || !defined(EXECD_MALLOC_TUNING)
  // Static builds only (see CMakeLists.txt); under a sanitizer its own
  // allocator replaces glibc's.
  (void)argv;
  return;
#else
  if (const char* mark = getenv(kMark)) return restore(mark);
  const char* given = getenv(kTunables);
  std::optional<std::string> tuned = tunables_without_malloc_caches(given);
  if (!tuned) return;
  char name[17] = {0};
  prctl(PR_GET_NAME, name, 0, 0, 0);
  std::string mark = std::string(name) + "/" + (given ? "=" + std::string(given) : "-");
  setenv(kMark, mark.c_str(), 1);
  setenv(kTunables, tuned->c_str(), 1);
  execv("/proc/self/exe", argv);
  restore(mark);  // no /proc: run as started
#endif
}

}  // namespace execd
