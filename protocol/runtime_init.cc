// protocol/runtime_init: see header.
#include "protocol/runtime_init.h"

#include <simdjson.h>

#include <nlohmann/json.hpp>

namespace execd::protocol {

namespace {

bool env_name(std::string_view k) {
  if (k.empty() || !(isalpha(static_cast<unsigned char>(k[0])) || k[0] == '_')) return false;
  for (char c : k)
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

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

std::variant<InitRequest, std::string> decode_init_request(std::string_view body) {
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element root;
  simdjson::dom::object obj;
  if (body.empty() || parser.parse(body.data(), body.size()).get(root) || root.get(obj))
    return std::string("the body must be a JSON object");
  InitRequest r;
  std::string_view sid;
  if (obj["sandboxId"].get(sid) || sid.empty() || sid.size() > 256 || sid.find('\0') != std::string_view::npos)
    return std::string("sandboxId is required (a string of 1-256 characters)");
  r.sandbox_id.assign(sid);
  simdjson::dom::element g;
  if (obj["generation"].get(g) || g.get(r.generation) || r.generation < 1)
    return std::string("generation is required (an integer > 0)");
  simdjson::dom::element v;
  if (!obj["accessTokenHash"].get(v) && !v.is_null()) {
    std::string_view h;
    constexpr std::string_view kPrefix = "sha256:";
    if (v.get(h) || h.substr(0, kPrefix.size()) != kPrefix || h.size() != kPrefix.size() + 64)
      return std::string("accessTokenHash must be sha256:<64 hex digits>");
    for (char c : h.substr(kPrefix.size())) {
      if (!isxdigit(static_cast<unsigned char>(c))) return std::string("accessTokenHash must be sha256:<64 hex digits>");
      r.token_sha256 += static_cast<char>(tolower(static_cast<unsigned char>(c)));
    }
  }
  if (!obj["envs"].get(v)) {
    if (auto err = string_map(v, "envs", r.envs); !err.empty()) return err;
    for (const auto& [k, val] : r.envs) {
      if (!env_name(k)) return "envs key " + k + " is not a variable name";
      if (k.rfind("EXECD_", 0) == 0) return "envs may not set execd's own setting " + k;
    }
  }
  if (!obj["telemetry"].get(v) && !v.is_null()) {
    simdjson::dom::object t;
    if (v.get(t)) return std::string("telemetry must be an object");
    simdjson::dom::element attrs;
    if (!t["attributes"].get(attrs)) {
      if (auto err = string_map(attrs, "telemetry.attributes", r.telemetry_attributes); !err.empty()) return err;
      if (r.telemetry_attributes.size() > kMaxTelemetryAttributes)
        return std::string("at most 64 telemetry.attributes");
      for (const auto& [k, val] : r.telemetry_attributes)
        if (k == "sandbox_id" || k == "generation") return "telemetry.attributes." + k + " is reserved";
    }
  }
  if (!obj["lifecycle"].get(v) && !v.is_null()) {
    simdjson::dom::object l;
    if (v.get(l)) return std::string("lifecycle must be an object");
    simdjson::dom::element h;
    if (!l["preStart"].get(h))
      if (auto err = hooks(h, "preStart", false, r.pre_start); !err.empty()) return err;
    if (!l["periodic"].get(h))
      if (auto err = hooks(h, "periodic", true, r.periodic); !err.empty()) return err;
  }
  if (!obj["entrypointPolicy"].get(v) && !v.is_null()) {
    std::string_view p;
    if (v.get(p) || (p != "keep" && p != "restart")) return std::string("entrypointPolicy must be keep or restart");
    r.restart_entrypoint = p == "restart";
  }
  return r;
}

std::string init_response_json(const InitRequest& r, const std::vector<std::string>& warnings) {
  nlohmann::ordered_json j;
  j["status"] = "initialized";
  j["sandboxId"] = r.sandbox_id;
  j["generation"] = r.generation;
  j["warning"] = warnings;
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace execd::protocol
