// Fuzz target: path routing and percent-decoding. A path either routes to one
// of the registered patterns with its captures taken from the path, or is not
// found; percent-decoding never grows a string.
#include <cstdlib>
#include <string>

#include "protocol/http.h"
#include "protocol/router.h"

using namespace execd::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view raw(reinterpret_cast<const char*>(data), size);
  std::string path;
  if (!percent_decode(raw, path, false)) return 0;
  if (path.size() > raw.size()) std::abort();

  Router<int> router;
  router.add("GET", "/files/info", 1);
  router.add("POST", "/session/:id/run", 2);
  router.add("GET", "/command/status/:id", 3);
  router.add("GET", "/proxy/:port", 4);
  for (const char* method : {"GET", "POST", "DELETE"}) {
    auto m = router.match(method, path);
    if (m.outcome == Router<int>::Outcome::found && (*m.target < 1 || *m.target > 4)) std::abort();
    if (m.outcome == Router<int>::Outcome::found && *m.target == 2) {
      const std::string& id = m.params.get("id");
      if (id.empty() || id.find('/') != std::string::npos) std::abort();
    }
  }
  return 0;
}
