// tests/unit/test_malloc_tuning.cc — what GLIBC_TUNABLES execd starts itself again with (execd/malloc_tuning).
#include <doctest/doctest.h>

#include "execd/malloc_tuning.h"

using execd::tunables_without_malloc_caches;

TEST_CASE("malloc tuning: the caches' tunable is added to what was given, unless it sets them") {
  CHECK(tunables_without_malloc_caches(nullptr) == "glibc.malloc.tcache_count=0");
  CHECK(tunables_without_malloc_caches("") == "glibc.malloc.tcache_count=0");
  CHECK(tunables_without_malloc_caches("glibc.malloc.mmap_threshold=4096") ==
        "glibc.malloc.mmap_threshold=4096:glibc.malloc.tcache_count=0");
  // The caller's own choice stands: no second start.
  CHECK_FALSE(tunables_without_malloc_caches("glibc.malloc.tcache_count=7"));
  CHECK_FALSE(tunables_without_malloc_caches("glibc.malloc.perturb=1:glibc.malloc.tcache_count=0"));
}
