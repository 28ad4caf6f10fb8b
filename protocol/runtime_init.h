// protocol/runtime_init: POST /internal/init (and /init), the one-shot runtime binding of a
// warm-pool execd (OpenSandbox PR 1871): decoding and validating its body
// into a plain struct, and the JSON of its answer and of GET /ready. No
// process or file logic: what binding does is execd/lifecycle/runtime_binding's.
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
  uint64_t generation = 0;
  std::string token_sha256;  // 64 lowercase hex digits, or empty
  std::vector<std::pair<std::string, std::string>> envs;
  std::vector<std::pair<std::string, std::string>> telemetry_attributes;
  std::vector<LifecycleHook> pre_start, periodic;
  bool restart_entrypoint = false;  // entrypointPolicy "restart" (default "keep")
  // What was accepted but dropped (reserved telemetry keys): the answer's
  // "warning" list.
  std::vector<std::string> warnings;
};

inline constexpr size_t kMaxTelemetryAttributes = 64;
inline constexpr size_t kMaxHooks = 16;
// OpenSandbox's bounds (model/init.go): bytes, as Go's len() counts.
inline constexpr size_t kMaxSandboxIdBytes = 128;
inline constexpr size_t kMaxEnvKeyBytes = 256;
inline constexpr size_t kMaxTelemetryKeyBytes = 128;
inline constexpr size_t kMaxTelemetryValueBytes = 1024;

// execd's own settings (isolation/config.go's blacklist): refused as
// binding envs (any case) and kept from every process execd starts.
inline constexpr std::string_view kReservedEnvKeys[] = {
    "EXECD_ACCESS_TOKEN",     "JUPYTER_HOST",          "JUPYTER_TOKEN",          "EXECD_ISOLATION_CONFIG",
    "EXECD_ENVS",             "OPENSANDBOX_LIFECYCLE", "EXECD_LIFECYCLE_CONFIG", "EXECD_RUNTIME_INIT"};
// `key` (any case) is one of kReservedEnvKeys.
bool reserved_env_key(std::string_view key);

// OPENSANDBOX_EXECD_METRICS_EXTRA_ATTRS ("k=v,k2=v2"; OpenSandbox
// internal/telemetry/attrs.go @31bc3664): split at commas, each part at its
// first '=', both sides trimmed; a part without '=', with an empty key or
// value, or with the key sandbox_id is skipped. Duplicates are all kept.
std::vector<std::pair<std::string, std::string>> parse_metric_extra_attrs(std::string_view raw);

// The message says what is wrong; the caller answers 400 with it.
std::variant<InitRequest, std::string> decode_init_request(std::string_view body);

// {"status":"initialized","sandboxId","generation","warning":[...]}, the
// warnings only when there are some.
std::string init_response_json(const InitRequest& r, const std::vector<std::string>& warnings);

}  // namespace execd::protocol
