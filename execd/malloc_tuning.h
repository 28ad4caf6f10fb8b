// execd/malloc_tuning: a static execd runs with glibc's per-thread malloc
// caches (the tcache) turned off. Each thread keeps up to 7 freed chunks of
// every small size there, and malloc_trim cannot give back a page that
// holds one: after 500 concurrent commands they held ~260 of the ~450
// resident heap pages (the loop's and six pool threads' caches), most of
// what the burst left. Without them the freed chunks go back to the arena,
// where the daemon's trim returns their pages. No CPU cost was measurable
// (docs/limits.md, "Memory goes back").
//
// glibc reads its tunables only when a process starts, and offers no call
// to change this one later. So execd starts itself again, once, with
// GLIBC_TUNABLES naming it, and then puts the variable back as it was given
// (commands inherit execd's environment), and its process name. Static
// builds only: a dynamic execd's second start would relink its libraries
// (start-up 6 → 9.5 ms), and its idle, libraries included, is three times
// the static one's, so the same growth is a third of the ratio (1.25x).
//
// Every execd, static or not, also sets glibc's arena count and its mmap
// and trim thresholds (tune_malloc_thresholds), so that what a burst
// allocated goes back to the system when it is freed.
#pragma once

#include <optional>
#include <string>

namespace execd {

// GLIBC_TUNABLES for execd, from what it was started with (null: unset);
// nullopt when the given value sets the tcache itself (that choice stands).
std::optional<std::string> tunables_without_malloc_caches(const char* given);

// The whole dance: re-executes execd through /proc/self/exe when needed
// (returns when it is not needed, or not possible: then execd runs with the
// caches), and after the re-execution restores the environment and name.
// Call first thing in main, before any thread exists.
void run_without_malloc_caches(char** argv);

// Two arenas, a fixed 2 MiB mmap threshold and an 8 MiB trim threshold
// (malloc_tuning.cc says why each). Call before the loop starts threads.
void tune_malloc_thresholds();

}  // namespace execd
