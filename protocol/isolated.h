// protocol/isolated: decoding and validating the /v1/isolated request bodies
// (simdjson), shapes as the opensandbox 1.1.1 client sends them, and the
// creation parameters echoed back (nlohmann). No paths are looked at here:
// whether they exist or may be bound is for the caller.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/requests.h"

namespace execd::protocol {

struct IsolatedOverlay {
  std::string path;
  std::string mode = "overlay";   // rw | overlay | ro
  std::optional<bool> persist;    // overlay only; absent = true
  bool persistent() const { return mode == "overlay" && persist.value_or(true); }
};

struct IsolatedBind {
  std::string source;
  std::string dest;  // empty = source
  bool readonly = false;
  const std::string& target() const { return dest.empty() ? source : dest; }
};

struct IsolatedCreateRequest {
  std::string profile = "strict";           // strict | balanced (absent: strict, as upstream)
  bool from_workspace = false;              // the legacy `workspace` field was given
  std::vector<IsolatedOverlay> overlays;    // effective mounts (`workspace` first)
  std::vector<std::string> extra_writable;
  std::vector<IsolatedBind> binds;
  bool share_net = true;                    // absent: shared, as upstream
  bool env_given = false;
  std::string env_mode = "deny";            // allow | deny
  std::vector<std::string> env_keys;
  std::optional<uint32_t> uid, gid;
  std::string uid_mode = "setpriv";         // setpriv | userns
  int64_t idle_timeout_seconds = 0;         // 0 = none
};

// At most this many overlay mounts per session (workspace included), as upstream.
constexpr size_t kMaxIsolatedOverlays = 16;

std::variant<IsolatedCreateRequest, DecodeError> decode_isolated_create(std::string_view body);

// The creation parameters, as GET echoes them (and the create response).
void echo_isolated_create(const IsolatedCreateRequest& req, nlohmann::ordered_json& out);

struct IsolatedRunRequest {
  std::string code;
  std::map<std::string, std::string> envs;
  int64_t timeout_seconds = 0;  // foreground only
  bool background = false;
  std::vector<std::string> track_changes;  // roots in the session's view
};
std::variant<IsolatedRunRequest, DecodeError> decode_isolated_run(std::string_view body);

// An absolute path with no empty, "." or ".." segment and no trailing slash
// ("/" itself is clean).
bool clean_absolute_path(std::string_view p);

}  // namespace execd::protocol
