// Fuzz target: the /v1/isolated request bodies (protocol/isolated,
// simdjson). Any bytes give either a request that satisfies the documented
// validation (what pty/namespaces later turns into mounts relies on it) or
// an error; the echo of a decoded request never throws.
#include <cstdlib>
#include <string>
#include <variant>

#include "protocol/isolated.h"

using namespace execd::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  auto create = decode_isolated_create(body);
  if (auto* c = std::get_if<IsolatedCreateRequest>(&create)) {
    if (c->overlays.empty() || c->overlays.size() > kMaxIsolatedOverlays) std::abort();
    for (const auto& o : c->overlays) {
      if (!clean_absolute_path(o.path)) std::abort();
      if (o.mode != "rw" && o.mode != "overlay" && o.mode != "ro") std::abort();
      if (o.persist && o.mode != "overlay") std::abort();
    }
    for (const auto& b : c->binds)
      if (!clean_absolute_path(b.source) || !clean_absolute_path(b.target())) std::abort();
    if (c->uid_mode != "setpriv" && c->uid_mode != "userns") std::abort();
    if (c->env_mode != "allow" && c->env_mode != "deny") std::abort();
    if (c->profile != "strict" && c->profile != "balanced") std::abort();
    if (c->idle_timeout_seconds < 0) std::abort();
    nlohmann::ordered_json echo;
    echo_isolated_create(*c, echo);
    (void)echo.dump();
  }
  auto run = decode_isolated_run(body);
  if (auto* r = std::get_if<IsolatedRunRequest>(&run))
    if (r->code.empty() || r->timeout_seconds < 0) std::abort();
  return 0;
}
