// Fuzz target: doublestar glob patterns for /files/search (fs/glob). Compiling
// any pattern and matching it against any path ends (no exponential blow-up:
// libFuzzer's timeout catches one), and a literal pattern matches itself.
#include <cstdlib>
#include <string>

#include "fs/glob.h"
#include "tests/fuzz/fuzz_input.h"

using execd::fs::GlobPattern;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto [pattern, path] = fuzz::two_parts(data, size);
  if (pattern.size() > 256 || path.size() > 1024) return 0;
  std::string why;
  auto glob = GlobPattern::compile(pattern, &why);
  if (!glob) {
    if (why.empty()) std::abort();
    return 0;
  }
  (void)glob->matches(path);
  size_t slash = path.rfind('/');
  (void)glob->matches_entry(path, slash == std::string_view::npos ? path : path.substr(slash + 1));

  bool literal = pattern.find_first_of("*?[]{}\\") == std::string_view::npos;
  if (literal && !glob->matches(pattern)) std::abort();
  return 0;
}
