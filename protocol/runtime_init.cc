// protocol/runtime_init: see header.
#include "protocol/runtime_init.h"

#include <simdjson.h>

#include <cstdio>

#include <nlohmann/json.hpp>

namespace execd::protocol {

namespace {

// A JSON object of strings into pairs, or why not.
std::string string_map(simdjson::dom::element v, std::string_view what,
                       std::vector<std::pair<std::string, std::string>>& out) {
  if (v.is_null()) return {};
  simdjson::dom::object obj;
  if (v.get(obj)) return std::string(what) + " must be an object of strings";
  for (auto field : obj) {
    std::string_view s;
    if (field.value.get(s)) return std::string(what) + "." + std::string(field.key) + " must be a string";
    if (s.find('\0') != std::string_view::npos || field.key.find('\0') != std::string_view::npos)
      return std::string(what) + " may not hold NUL bytes";
    out.emplace_back(std::string(field.key), std::string(s));
  }
  return {};
}

std::string seconds(simdjson::dom::object h, const char* key, int64_t& ms, bool required) {
  simdjson::dom::element v;
  if (h[key].get(v)) return required ? std::string(key) + " is required" : std::string();
  int64_t n;
  if (v.get(n) || n < 1 || n > 86400 * 365) return std::string(key) + " must be a whole number of seconds >= 1";
  ms = n * 1000;
  return {};
}

std::string hooks(simdjson::dom::element v, const char* what, bool periodic, std::vector<LifecycleHook>& out) {
  if (v.is_null()) return {};
  simdjson::dom::array arr;
  if (v.get(arr)) return std::string("lifecycle.") + what + " must be an array";
  for (simdjson::dom::element e : arr) {
    simdjson::dom::object h;
    if (e.get(h)) return std::string("lifecycle.") + what + " entries must be objects";
    LifecycleHook hook;
    std::string_view name;
    if (h["name"].get(name) || name.empty() || name.size() > 64)
      return std::string("lifecycle.") + what + " entries need a name (1-64 characters)";
    for (char c : name)
      if (!(isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
        return std::string("lifecycle hook name ") + std::string(name) + " may hold only letters, digits, '-', '_', '.'";
    hook.name.assign(name);
    for (const auto& other : out)
      if (other.name == hook.name) return "lifecycle hook name " + hook.name + " is used twice";
    simdjson::dom::element c;
    bool has_command = !h["command"].get(c) && !c.is_null();
    simdjson::dom::element a;
    bool has_argv = !h["argv"].get(a) && !a.is_null();
    if (has_command == has_argv) return "lifecycle hook " + hook.name + " needs exactly one of command and argv";
    if (has_command) {
      std::string_view s;
      if (c.get(s) || s.empty() || s.find('\0') != std::string_view::npos)
        return "lifecycle hook " + hook.name + ": command must be a non-empty string";
      hook.command.assign(s);
    } else {
      simdjson::dom::array items;
      if (a.get(items)) return "lifecycle hook " + hook.name + ": argv must be an array of strings";
      for (simdjson::dom::element item : items) {
        std::string_view s;
        if (item.get(s) || s.find('\0') != std::string_view::npos)
          return "lifecycle hook " + hook.name + ": argv must be an array of strings";
        hook.argv.emplace_back(s);
      }
      if (hook.argv.empty() || hook.argv[0].empty()) return "lifecycle hook " + hook.name + ": argv[0] is required";
    }
    if (auto err = seconds(h, "timeoutSeconds", hook.timeout_ms, false); !err.empty())
      return "lifecycle hook " + hook.name + ": " + err;
    if (periodic)
      if (auto err = seconds(h, "intervalSeconds", hook.interval_ms, true); !err.empty())
        return "lifecycle hook " + hook.name + ": " + err;
    out.push_back(std::move(hook));
    if (out.size() > kMaxHooks) return std::string("at most 16 lifecycle.") + what + " hooks";
  }
  return {};
}

}  // namespace

namespace {

std::string_view trim_space(std::string_view s) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// binding.go's ParseAccessTokenHash, its texts included: 64 lowercase hex
// digits, or why not.
std::string parse_token_hash(std::string_view raw, std::string& out) {
  std::string_view h = trim_space(raw);
  constexpr std::string_view kPrefix = "sha256:";
  if (h.substr(0, kPrefix.size()) != kPrefix) return "access token hash must use sha256:<hex> format";
  h.remove_prefix(kPrefix.size());
  // encoding/hex reports the first bad byte before an odd length.
  for (size_t i = 0; i < h.size(); ++i)
    if (hex_value(h[i]) < 0) {
      // Go: "U+0067 'g'" (a non-ASCII byte as its code point alone).
      auto b = static_cast<unsigned char>(h[i]);
      char buf[48];
      if (b >= 0x20 && b < 0x7f) snprintf(buf, sizeof buf, "U+%04X '%c'", b, b);
      else snprintf(buf, sizeof buf, "U+%04X", b);
      return std::string("access token hash is not valid hex: encoding/hex: invalid byte: ") + buf;
    }
  if (h.size() % 2) return "access token hash is not valid hex: encoding/hex: odd length hex string";
  if (h.size() != 64) return "access token hash must be 32 hex bytes, got " + std::to_string(h.size() / 2);
  out.clear();
  for (char c : h) out += static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return {};
}

}  // namespace

bool reserved_env_key(std::string_view key) {
  const std::string k = upper(key);
  for (std::string_view r : kReservedEnvKeys)
    if (k == r) return true;
  return false;
}

std::vector<std::pair<std::string, std::string>> parse_metric_extra_attrs(std::string_view raw) {
  std::vector<std::pair<std::string, std::string>> out;
  raw = trim_space(raw);
  while (!raw.empty()) {
    size_t comma = raw.find(',');
    std::string_view part = trim_space(raw.substr(0, comma));
    raw = comma == std::string_view::npos ? std::string_view() : raw.substr(comma + 1);
    size_t eq = part.find('=');
    if (part.empty() || eq == std::string_view::npos || eq == 0 || eq == part.size() - 1) continue;
    std::string_view key = trim_space(part.substr(0, eq)), value = trim_space(part.substr(eq + 1));
    if (key.empty() || key == "sandbox_id") continue;
    out.emplace_back(std::string(key), std::string(value));
  }
  return out;
}

std::variant<InitRequest, std::string> decode_init_request(std::string_view body) {
  // 1. Decoding: the shape and the types of the fields (Go's json.Decode).
  const std::string decode = "invalid runtime init request: ";
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element root;
  simdjson::dom::object obj;
  if (trim_space(body).empty()) return decode + "EOF";
  if (parser.parse(body.data(), body.size()).get(root)) return decode + "the body is not JSON";
  if (root.get(obj)) return decode + "the body must be a JSON object";
  InitRequest r;
  simdjson::dom::element v;
  std::string_view sid, policy, token_hash;
  if (!obj["sandboxId"].get(v) && !v.is_null()) {
    if (v.get(sid) || sid.find('\0') != std::string_view::npos) return decode + "sandboxId must be a string";
  }
  if (!obj["generation"].get(v) && !v.is_null()) {
    if (v.get(r.generation)) return decode + "generation must be an unsigned integer";
  }
  if (!obj["entrypointPolicy"].get(v) && !v.is_null()) {
    if (v.get(policy)) return decode + "entrypointPolicy must be a string";
  }
  if (!obj["accessTokenHash"].get(v) && !v.is_null()) {
    if (v.get(token_hash)) return decode + "accessTokenHash must be a string";
  }
  if (!obj["envs"].get(v))
    if (auto err = string_map(v, "envs", r.envs); !err.empty()) return decode + err;
  bool has_telemetry = false;
  std::vector<std::pair<std::string, std::string>> attrs;
  if (!obj["telemetry"].get(v) && !v.is_null()) {
    simdjson::dom::object t;
    if (v.get(t)) return decode + "telemetry must be an object";
    has_telemetry = true;
    simdjson::dom::element a;
    if (!t["attributes"].get(a))
      if (auto err = string_map(a, "telemetry.attributes", attrs); !err.empty()) return decode + err;
  }
  simdjson::dom::object lifecycle;
  bool has_lifecycle = false;
  if (!obj["lifecycle"].get(v) && !v.is_null()) {
    if (v.get(lifecycle)) return decode + "lifecycle must be an object";
    has_lifecycle = true;
  }

  // 2. Validation, in init.go's order and with its texts.
  sid = trim_space(sid);
  if (sid.empty()) return std::string("sandboxId must not be blank");
  if (sid.size() > kMaxSandboxIdBytes) return std::string("sandboxId must not exceed 128 characters");
  r.sandbox_id.assign(sid);
  if (r.generation == 0) return std::string("generation must be a positive integer");
  if (!policy.empty() && policy != "keep" && policy != "restart")
    return std::string("entrypointPolicy must be \"keep\" or \"restart\"");
  r.restart_entrypoint = policy == "restart";
  for (const auto& [k, val] : r.envs) {
    if (k.empty()) return std::string("envs must not contain blank keys");
    if (k.size() > kMaxEnvKeyBytes) return "env key \"" + k + "\" must not exceed 256 characters";
    if (reserved_env_key(k)) return "env key \"" + k + "\" is reserved by execd and must not be set via /internal/init";
    // Not checked upstream: a key with '=' would set another variable.
    if (k.find('=') != std::string::npos) return "env key \"" + k + "\" must not contain '='";
  }
  if (has_lifecycle) {
    simdjson::dom::element h;
    if (!lifecycle["preStart"].get(h))
      if (auto err = hooks(h, "preStart", false, r.pre_start); !err.empty()) return "invalid lifecycle: " + err;
    if (!lifecycle["periodic"].get(h))
      if (auto err = hooks(h, "periodic", true, r.periodic); !err.empty()) return "invalid lifecycle: " + err;
  }
  if (has_telemetry) {
    if (attrs.size() > kMaxTelemetryAttributes) return std::string("telemetry attributes must not exceed 64 entries");
    for (auto& [k, val] : attrs) {
      if (trim_space(k).empty()) return std::string("telemetry attributes must not contain blank keys");
      if (k.size() > kMaxTelemetryKeyBytes) return "telemetry attribute key \"" + k + "\" must not exceed 128 characters";
      if (val.size() > kMaxTelemetryValueBytes) return "telemetry attribute \"" + k + "\" value must not exceed 1024 bytes";
      if (k == "sandbox_id" || k == "generation") {
        r.warnings.push_back("telemetry attribute " + k + " is reserved and was dropped");
        continue;
      }
      r.telemetry_attributes.emplace_back(std::move(k), std::move(val));
    }
  }
  if (!token_hash.empty())
    if (auto err = parse_token_hash(token_hash, r.token_sha256); !err.empty()) return err;
  return r;
}

std::string init_response_json(const InitRequest& r, const std::vector<std::string>& warnings) {
  nlohmann::ordered_json j;
  j["status"] = "initialized";
  j["sandboxId"] = r.sandbox_id;
  j["generation"] = r.generation;
  if (!warnings.empty()) j["warning"] = warnings;  // Go: omitempty
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace execd::protocol
