// execd/malloc_tuning: see header.
#include "execd/malloc_tuning.h"

#include <malloc.h>
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

void tune_malloc_thresholds() {
  // glibc gives each thread that allocates its own arena (16 KiB resident
  // each once used): the pool threads, which allocate little, share one
  // besides the loop's, so a warm pool costs ~16 KiB, not ~240.
  mallopt(M_ARENA_MAX, 2);
  // A fixed mmap threshold: anything of 2 MiB or more (a kernel's large
  // print as it arrives from the kernel, a burst's buffers) goes back to the
  // system when freed. glibc's default raises the threshold after each such
  // free, and the next large buffers then stayed resident for good (256 MiB
  // ten seconds after one 128 MiB print). Streaming buffers (up to ~0.5 MiB)
  // stay below it.
  mallopt(M_MMAP_THRESHOLD, 2 << 20);
  // Setting the threshold also fixes the trim threshold at its 128 KiB
  // default: every free at the top of the heap gave pages back, and a
  // stream's buffers (the output log's, about 1.5 MiB) were faulted in again
  // for each write (clear_page and page faults were ~10% of execd's CPU per
  // streamed byte). The daemon's tick trims on its own terms (when quiet, or
  // when much lies free), so the heap may keep a few MiB between ticks.
  mallopt(M_TRIM_THRESHOLD, 8 << 20);
}

}  // namespace execd
