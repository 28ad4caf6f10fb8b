// protocol/runtime_init: POST /init, the one-shot runtime binding of a
// warm-pool execd (OpenSandbox PR 1871): decoding and validating its body
// into a plain struct, and the JSON of its answer and of GET /ready. No
// process or file logic: what binding does is execd/api/runtime_binding's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace execd::protocol {

// A lifecycle hook (OSEP-0020): a trusted command, shell text or argv.
struct LifecycleHook {
  std::string name;
  std::string command;
  std::vector<std::string> argv;
  int64_t timeout_ms = 0;   // 0: none
  int64_t interval_ms = 0;  // periodic hooks only
};

struct InitRequest {
  std::string sandbox_id;
  int64_t generation = 0;
  std::string token_sha256;  // 64 lowercase hex digits, or empty
  std::vector<std::pair<std::string, std::string>> envs;
  std::vector<std::pair<std::string, std::string>> telemetry_attributes;
  std::vector<LifecycleHook> pre_start, periodic;
  bool restart_entrypoint = false;  // entrypointPolicy "restart" (default "keep")
};

inline constexpr size_t kMaxTelemetryAttributes = 64;
inline constexpr size_t kMaxHooks = 16;

// The message says what is wrong; the caller answers 400 with it.
std::variant<InitRequest, std::string> decode_init_request(std::string_view body);

// {"status":"initialized","sandboxId","generation","warning":[...]}
std::string init_response_json(const InitRequest& r, const std::vector<std::string>& warnings);

}  // namespace execd::protocol
