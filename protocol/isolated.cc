// protocol/isolated: see header.
#include "protocol/isolated.h"

#include "protocol/track_request.h"

#include <simdjson.h>

#include <set>

namespace execd::protocol {
namespace {

simdjson::dom::parser& isolated_parser() {
  thread_local simdjson::dom::parser p;
  return p;
}

std::string field_error(std::string_view field, std::string_view want) {
  return "invalid request, validation error: field '" + std::string(field) + "' must be " + std::string(want);
}

bool get_string(simdjson::dom::element v, std::string& out) {
  std::string_view s;
  if (v.get(s)) return false;
  if (s.find('\0') != std::string_view::npos) return false;
  out.assign(s);
  return true;
}

// {"path", "mode", "persist"}: the legacy workspace (no persist) and an overlay.
std::optional<std::string> decode_overlay(simdjson::dom::element v, std::string_view where, bool allow_persist,
                                          IsolatedOverlay& out) {
  simdjson::dom::object o;
  if (v.get(o)) return field_error(where, "an object");
  bool has_path = false;
  for (auto f : o) {
    if (f.value.is_null()) continue;
    if (f.key == "path") {
      if (!get_string(f.value, out.path)) return field_error(std::string(where) + ".path", "a string");
      has_path = true;
    } else if (f.key == "mode") {
      if (!get_string(f.value, out.mode)) return field_error(std::string(where) + ".mode", "a string");
      if (out.mode.empty()) out.mode = "overlay";
      if (out.mode != "rw" && out.mode != "overlay" && out.mode != "ro")
        return "invalid request, validation error: invalid " + std::string(where) + " mode \"" + out.mode +
               "\": must be rw, overlay, or ro";
    } else if (f.key == "persist" && allow_persist) {
      bool b;
      if (f.value.get(b)) return field_error(std::string(where) + ".persist", "a boolean");
      out.persist = b;
    }
  }
  if (!has_path || out.path.empty()) return "invalid request, validation error: " + std::string(where) + ".path is required";
  if (out.persist && out.mode != "overlay")
    return "invalid request, validation error: " + std::string(where) + ".persist applies to mode overlay only";
  return std::nullopt;
}

std::optional<std::string> decode_string_list(simdjson::dom::element v, std::string_view where,
                                              std::vector<std::string>& out) {
  simdjson::dom::array a;
  if (v.get(a)) return field_error(where, "an array of strings");
  for (auto item : a) {
    std::string s;
    if (!get_string(item, s)) return field_error(where, "an array of strings");
    out.push_back(std::move(s));
  }
  return std::nullopt;
}

}  // namespace

bool clean_absolute_path(std::string_view p) {
  if (p.empty() || p[0] != '/') return false;
  if (p == "/") return true;
  if (p.back() == '/') return false;
  size_t at = 1;
  while (at <= p.size()) {
    size_t slash = p.find('/', at);
    std::string_view seg = p.substr(at, slash == std::string_view::npos ? std::string_view::npos : slash - at);
    if (seg.empty() || seg == "." || seg == "..") return false;
    if (slash == std::string_view::npos) break;
    at = slash + 1;
  }
  return true;
}

namespace {
// The request body as a JSON object (valid until the next parse), or why
// it is not one.
std::optional<DecodeError> body_object(std::string_view body, simdjson::dom::object& obj) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos)
    return DecodeError{"invalid request body: empty body"};
  simdjson::dom::element root;
  if (auto err = isolated_parser().parse(body.data(), body.size()).get(root))
    return DecodeError{std::string("invalid request body: ") + simdjson::error_message(err)};
  if (root.get(obj)) return DecodeError{"invalid request body: expected a JSON object"};
  return std::nullopt;
}
}  // namespace

std::variant<IsolatedCreateRequest, DecodeError> decode_isolated_create(std::string_view body) {
  simdjson::dom::object obj;
  if (auto e = body_object(body, obj)) return *e;
  IsolatedCreateRequest req;
  std::optional<IsolatedOverlay> workspace;
  std::vector<IsolatedOverlay> overlays;
  for (auto f : obj) {
    std::string_view key = f.key;
    simdjson::dom::element v = f.value;
    if (v.is_null()) continue;
    if (key == "profile") {
      if (!get_string(v, req.profile)) return DecodeError{field_error(key, "a string")};
      if (req.profile.empty()) req.profile = "strict";
      if (req.profile != "strict" && req.profile != "balanced")
        return DecodeError{"invalid request, validation error: unknown isolation profile \"" + req.profile +
                           "\": must be strict or balanced"};
    } else if (key == "workspace") {
      IsolatedOverlay w;
      if (auto e = decode_overlay(v, "workspace", false, w)) return DecodeError{*e};
      workspace = std::move(w);
    } else if (key == "overlays") {
      simdjson::dom::array a;
      if (v.get(a)) return DecodeError{field_error(key, "an array of objects")};
      size_t i = 0;
      for (auto item : a) {
        IsolatedOverlay o;
        if (auto e = decode_overlay(item, "overlays[" + std::to_string(i++) + "]", true, o)) return DecodeError{*e};
        overlays.push_back(std::move(o));
      }
    } else if (key == "extra_writable") {
      if (auto e = decode_string_list(v, key, req.extra_writable)) return DecodeError{*e};
    } else if (key == "binds") {
      simdjson::dom::array a;
      if (v.get(a)) return DecodeError{field_error(key, "an array of objects")};
      size_t i = 0;
      for (auto item : a) {
        std::string where = "binds[" + std::to_string(i++) + "]";
        simdjson::dom::object o;
        if (item.get(o)) return DecodeError{field_error(where, "an object")};
        IsolatedBind b;
        for (auto bf : o) {
          if (bf.value.is_null()) continue;
          if (bf.key == "source" && !get_string(bf.value, b.source))
            return DecodeError{field_error(where + ".source", "a string")};
          if (bf.key == "dest" && !get_string(bf.value, b.dest))
            return DecodeError{field_error(where + ".dest", "a string")};
          if (bf.key == "readonly" && bf.value.get(b.readonly))
            return DecodeError{field_error(where + ".readonly", "a boolean")};
        }
        if (b.source.empty()) return DecodeError{"invalid request, validation error: " + where + ".source is required"};
        // Clean too: without a dest the source is also the mount point inside.
        if (!clean_absolute_path(b.source))
          return DecodeError{"invalid request, validation error: " + where + ".source \"" + b.source +
                             "\" must be a clean absolute path"};
        if (!b.dest.empty() && !clean_absolute_path(b.dest))
          return DecodeError{"invalid request, validation error: " + where + ".dest \"" + b.dest +
                             "\" must be a clean absolute path"};
        req.binds.push_back(std::move(b));
      }
    } else if (key == "share_net") {
      if (v.get(req.share_net)) return DecodeError{field_error(key, "a boolean")};
    } else if (key == "env_passthrough") {
      simdjson::dom::object o;
      if (v.get(o)) return DecodeError{field_error(key, "an object")};
      req.env_given = true;
      for (auto ef : o) {
        if (ef.value.is_null()) continue;
        if (ef.key == "mode") {
          if (!get_string(ef.value, req.env_mode)) return DecodeError{field_error("env_passthrough.mode", "a string")};
          if (req.env_mode.empty()) req.env_mode = "deny";
          if (req.env_mode != "allow" && req.env_mode != "deny")
            return DecodeError{"invalid request, validation error: invalid env_passthrough mode \"" + req.env_mode +
                               "\": must be \"deny\" or \"allow\""};
        } else if (ef.key == "keys") {
          if (auto e = decode_string_list(ef.value, "env_passthrough.keys", req.env_keys)) return DecodeError{*e};
        }
      }
    } else if (key == "uid" || key == "gid") {
      int64_t id;
      if (v.get(id) || id < 0 || id > 0xFFFFFFFFll) return DecodeError{field_error(key, "an unsigned 32-bit integer")};
      (key == "uid" ? req.uid : req.gid) = static_cast<uint32_t>(id);
    } else if (key == "uid_mode") {
      if (!get_string(v, req.uid_mode)) return DecodeError{field_error(key, "a string")};
      if (req.uid_mode.empty()) req.uid_mode = "setpriv";
      if (req.uid_mode != "setpriv" && req.uid_mode != "userns")
        return DecodeError{"invalid request, validation error: invalid uid_mode \"" + req.uid_mode +
                           "\": must be \"setpriv\" or \"userns\""};
    } else if (key == "idle_timeout_seconds") {
      int64_t t;
      if (v.get(t) || t < 0) return DecodeError{field_error(key, "a non-negative integer")};
      req.idle_timeout_seconds = t;
    }
  }
  if (workspace) {
    req.from_workspace = true;
    req.overlays.push_back(std::move(*workspace));
  }
  for (auto& o : overlays) req.overlays.push_back(std::move(o));
  if (req.overlays.empty())
    return DecodeError{"invalid request, validation error: at least one of workspace or overlays is required"};
  if (req.overlays.size() > kMaxIsolatedOverlays)
    return DecodeError{"invalid request, validation error: at most " + std::to_string(kMaxIsolatedOverlays) +
                       " overlay mounts per session"};
  std::set<std::string> seen;
  for (const auto& o : req.overlays) {
    if (!clean_absolute_path(o.path))
      return DecodeError{"invalid request, validation error: overlay path \"" + o.path +
                         "\" must be absolute and clean (no trailing slash, '.' or '..' segments)"};
    if (!seen.insert(o.path).second)
      return DecodeError{"invalid request, validation error: overlay path \"" + o.path + "\" appears twice"};
  }
  for (const auto& p : req.extra_writable)
    if (!clean_absolute_path(p))
      return DecodeError{"invalid request, validation error: extra_writable path \"" + p + "\" must be absolute"};
  return req;
}

void echo_isolated_create(const IsolatedCreateRequest& req, nlohmann::ordered_json& out) {
  auto overlay = [](const IsolatedOverlay& o, bool with_persist) {
    nlohmann::ordered_json j;
    j["path"] = o.path;
    j["mode"] = o.mode;
    if (with_persist && o.mode == "overlay") j["persist"] = o.persist.value_or(true);
    return j;
  };
  out["profile"] = req.profile;
  if (req.from_workspace && req.overlays.size() == 1) out["workspace"] = overlay(req.overlays[0], false);
  nlohmann::ordered_json overlays = nlohmann::ordered_json::array();
  for (const auto& o : req.overlays) overlays.push_back(overlay(o, true));
  out["overlays"] = std::move(overlays);
  out["extra_writable"] = req.extra_writable;
  nlohmann::ordered_json binds = nlohmann::ordered_json::array();
  for (const auto& b : req.binds) {
    nlohmann::ordered_json j;
    j["source"] = b.source;
    j["dest"] = b.target();
    j["readonly"] = b.readonly;
    binds.push_back(std::move(j));
  }
  out["binds"] = std::move(binds);
  out["share_net"] = req.share_net;
  nlohmann::ordered_json env;
  env["mode"] = req.env_mode;
  env["keys"] = req.env_keys;
  out["env_passthrough"] = std::move(env);
  if (req.uid) out["uid"] = *req.uid;
  if (req.gid) out["gid"] = *req.gid;
  out["uid_mode"] = req.uid_mode;
  out["idle_timeout_seconds"] = req.idle_timeout_seconds;
}

std::variant<IsolatedRunRequest, DecodeError> decode_isolated_run(std::string_view body) {
  simdjson::dom::object obj;
  if (auto e = body_object(body, obj)) return *e;
  IsolatedRunRequest req;
  for (auto f : obj) {
    std::string_view key = f.key;
    simdjson::dom::element v = f.value;
    if (v.is_null()) continue;
    if (key == "code") {
      if (!get_string(v, req.code)) return DecodeError{field_error(key, "a string without NUL bytes")};
    } else if (key == "timeout_seconds") {
      int64_t t;
      if (v.get(t) || t < 0) return DecodeError{field_error(key, "a non-negative integer")};
      req.timeout_seconds = t;
    } else if (key == "background") {
      if (v.get(req.background)) return DecodeError{field_error(key, "a boolean")};
    } else if (key == "track_changes") {
      if (const char* why = decode_track_changes(v, req.track_changes)) return DecodeError{why};
    } else if (key == "envs") {
      simdjson::dom::object envs;
      if (v.get(envs)) return DecodeError{field_error(key, "an object of strings")};
      for (auto kv : envs) {
        std::string val;
        if (!get_string(kv.value, val)) return DecodeError{field_error("envs." + std::string(kv.key), "a string")};
        std::string_view k = kv.key;
        bool name_ok = !k.empty() && !(k[0] >= '0' && k[0] <= '9');
        for (char c : k) name_ok &= (c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'));
        if (!name_ok)
          return DecodeError{"invalid request, validation error: envs key \"" + std::string(k) +
                             "\" is not a shell variable name"};
        req.envs[std::string(k)] = std::move(val);
      }
    }
  }
  if (req.code.find_first_not_of(" \t\r\n") == std::string::npos)
    return DecodeError{"invalid request, validation error: code is required"};
  return req;
}

}  // namespace execd::protocol
