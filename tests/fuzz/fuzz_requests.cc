// Fuzz target: JSON request decoding (protocol/requests and
// protocol/file_requests, simdjson) for /command, /session,
// /session/{id}/run, /pty and the file API's bodies. Any bytes give either a
// decoded request that satisfies the documented validation or an error.
#include <cstdlib>
#include <string>
#include <variant>

#include "protocol/file_requests.h"
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
  auto perms = decode_permission_map(body);
  if (auto* p = std::get_if<PermissionList>(&perms))
    for (auto& [path, spec] : *p)
      if (spec.mode && *spec.mode > 07777) std::abort();
  (void)decode_move_list(body);
  (void)decode_replace_map(body);
  auto meta = decode_upload_metadata(body);
  if (auto* m = std::get_if<UploadMetadata>(&meta))
    if (m->path.empty()) std::abort();
  std::string error;
  if (auto v = first_json_value(body, error))
    if (v->empty() || v->data() < body.data() || v->data() + v->size() > body.data() + body.size()) std::abort();
  return 0;
}
