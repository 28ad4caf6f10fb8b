// Fuzz target: JSON request decoding (protocol/requests, simdjson) for
// /command, /session, /session/{id}/run and /pty bodies. Any bytes give either
// a decoded request that satisfies the documented validation or an error.
#include <cstdlib>
#include <string>
#include <variant>

#include "protocol/requests.h"

using namespace execd::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view body(reinterpret_cast<const char*>(data), size);
  auto command = decode_command_request(body);
  if (auto* c = std::get_if<CommandRequest>(&command)) {
    if (c->command.empty()) std::abort();
    if (c->gid && !c->uid) std::abort();
    if (c->timeout_ms < 0) std::abort();
    for (auto& [k, v] : c->envs)
      if (k.empty() || k.find('=') != std::string::npos) std::abort();
  }
  auto run = decode_session_run(body);
  if (auto* r = std::get_if<SessionRunRequest>(&run)) {
    if (r->command.empty() || r->timeout_ms < 0) std::abort();
  }
  (void)decode_session_create(body);
  (void)decode_pty_create(body);
  return 0;
}
