// execd/api/isolated: see header.
//
// Routes (the opensandbox 1.1.1 client's isolated_execution API):
//   GET    /v1/isolated/capabilities
//   POST   /v1/isolated/session                   201 {session_id, created_at, ...echo}
//   GET    /v1/isolated/sessions                  {sessions: [...]}
//   GET    /v1/isolated/session/{id}              {status, created_at, last_run_at, ...echo}
//   DELETE /v1/isolated/session/{id}
//   POST   /v1/isolated/session/{id}/run          (api/isolated_runs)
//   GET    /v1/isolated/session/{id}/runs/{run}   (api/isolated_runs)
//   GET    /v1/isolated/session/{id}/runs/{run}/logs?cursor=N   (api/isolated_runs)
//   GET    /v1/isolated/session/{id}/diff          (api/isolated_layers)
//   POST   /v1/isolated/session/{id}/commit        (api/isolated_layers)
//   .../{id}/files/*, .../{id}/directories*       the file routes, inside the session
#include "execd/api/isolated.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "execd/api/api.h"
#include "execd/api/isolated_layers.h"
#include "execd/clock.h"
#include "execd/limits.h"
#include "protocol/errors.h"
#include "protocol/isolated.h"
#include "pty/hardening.h"

namespace execd::api {

namespace codes = protocol::codes;
using http::Exchange;
using ojson = nlohmann::ordered_json;
using sessions::IsolatedRegistry;
using sessions::IsolatedSession;

namespace {
constexpr const char* kServiceUnavailable = "SERVICE_UNAVAILABLE";
constexpr const char* kNotSupported = "NOT_SUPPORTED";

// A session's own file service, made at its first file request: the plain
// one's gate, journal and budget, inside the session's mount namespace, the
// journal naming the session. It lives as long as the session.
struct SessionFiles : sessions::SessionAttachment {
  explicit SessionFiles(FileService svc) : svc(std::move(svc)) {}
  FileService svc;
};

FileService& session_files(FileService& plain, IsolatedSession& s) {
  if (!s.files)
    s.files = std::make_unique<SessionFiles>(
        FileService{plain.ctx, plain.gate, plain.journal, nullptr, s.mount, s.id, plain.state_budget});
  return static_cast<SessionFiles&>(*s.files).svc;
}

void respond_created(Exchange& ex, const IsolatedSession& s) {
  ojson j;
  j["session_id"] = s.id;
  j["created_at"] = rfc3339_nano(s.created_ns);
  protocol::echo_isolated_create(s.spec, j);
  ex.respond_json(201, j.dump());
}

void handle_capabilities(IsolatedRegistry& reg, Exchange& ex) {
  const pty::IsolationProbe& p = reg.probe();
  ojson j;
  j["available"] = p.available;
  j["isolator"] = "linux-namespaces";
  j["version"] = p.kernel;
  if (!p.message.empty()) j["message"] = p.message;
  j["setpriv_available"] = p.available && p.setpriv;  // another uid needs CAP_SETUID/CAP_SETGID
  j["userns_available"] = p.available && p.userns;
  j["commit_supported"] = p.available && p.overlay;
  j["diff_supported"] = p.available && p.overlay;
  ojson h;
  bool pid1 = getpid() == 1;
  // execd always reaps orphans as a child subreaper; as PID 1 it is the init.
  h["init_mode"] = pid1 ? "pid1" : "subreaper";
  h["signal_shield"] = pid1;
  auto layer = [](const pty::LayerReport& r) {
    ojson l;
    l["state"] = pty::layer_state_name(r.state);
    if (!r.message.empty()) l["message"] = r.message;
    return l;
  };
  if (const pty::Hardening* hd = reg.hardening()) {
    h["cap_drop"] = layer(hd->caps_report);
    h["seccomp"] = layer(hd->seccomp_report);
    h["landlock"] = layer(hd->landlock_report);
    h["no_new_privs"] = layer(hd->nnp_report);
  }
  h["ebpf"] = layer({pty::LayerState::unsupported, "execd has no eBPF observation"});
  j["hardening"] = std::move(h);
  // What a session's processes see of the host and may make (README,
  // "What a session can and cannot do"); not upstream's.
  if (p.available) {
    ojson v;
    v["mode"] = pty::root_view_name(p.root_view);
    v["message"] = p.root_view_message;
    v["hidden"] = reg.hidden_paths();
    v["not_idmapped"] = p.not_idmapped;
    j["root_view"] = std::move(v);
    ojson n;
    n["refused"] = p.refuses_namespaces;
    n["message"] = p.namespaces_message;
    j["new_namespaces"] = std::move(n);
  }
  ex.respond_json(200, j.dump());
}

void handle_create(IsolatedRegistry& reg, Exchange& ex) {
  if (!require_isolation(reg, ex)) return;
  const pty::IsolationProbe& p = reg.probe();
  auto decoded = protocol::decode_isolated_create(ex.request().body);
  if (auto* err = std::get_if<protocol::DecodeError>(&decoded))
    return ex.respond_error(400, codes::kInvalidRequestBody, err->message);
  auto req = std::move(std::get<protocol::IsolatedCreateRequest>(decoded));
  if (req.uid_mode == "userns" && !p.userns)
    return ex.respond_error(503, kNotSupported, "uid_mode userns is unavailable here: " + p.message);
  bool other_id = (req.uid && *req.uid != geteuid()) || (req.gid && *req.gid != getegid());
  if (req.uid_mode == "setpriv" && other_id && !p.setpriv)
    return ex.respond_error(503, kNotSupported, "execd cannot switch to another uid or gid here (no CAP_SETUID/CAP_SETGID)");
  bool wants_overlay = false;
  for (const auto& o : req.overlays) wants_overlay |= o.persistent();
  if (wants_overlay && !p.overlay) return ex.respond_error(503, kNotSupported, p.message);
  // A holder and its ready pipe, six namespace descriptors, a shell with its pipes.
  if (!admit(ex, reg.count(), reg.ctx().config.max_isolated_sessions, "isolated sessions", "max-isolated-sessions") ||
      !admit_descriptors(ex, 16, "an isolated session"))
    return;
  reg.create(ex, std::move(req), respond_created);
}

void session_summary(const IsolatedSession& s, ojson& j) {
  j["status"] = s.status();
  j["created_at"] = rfc3339_nano(s.created_ns);
  j["last_run_at"] = rfc3339_nano(s.last_run_ns);
  if (s.spec.idle_timeout_seconds > 0) {
    int64_t idle = (unix_ns() - s.last_run_ns) / 1000000000ll;
    j["idle_remaining_seconds"] = std::max<int64_t>(0, s.spec.idle_timeout_seconds - idle);
  } else {
    j["idle_remaining_seconds"] = nullptr;
  }
}

void handle_get(IsolatedRegistry& reg, Exchange& ex) {
  IsolatedSession* s = require_session(reg, ex);
  if (!s) return;
  ojson j;
  session_summary(*s, j);
  protocol::echo_isolated_create(s->spec, j);
  ex.respond_json(200, j.dump());
}

void handle_list(IsolatedRegistry& reg, Exchange& ex) {
  if (!require_isolation(reg, ex)) return;
  ojson list = ojson::array();
  for (const auto& [id, s] : reg.sessions()) {
    ojson j;
    j["session_id"] = id;
    session_summary(*s, j);
    list.push_back(std::move(j));
  }
  ojson j;
  j["sessions"] = std::move(list);
  ex.respond_json(200, j.dump());
}

void handle_delete(IsolatedRegistry& reg, Exchange& ex) {
  IsolatedSession* s = require_session(reg, ex);
  if (!s) return;
  reg.remove(s->id);
  ex.respond_empty(200);
}

}  // namespace

// Every route but capabilities needs the isolator.
bool require_isolation(IsolatedRegistry& reg, Exchange& ex) {
  const pty::IsolationProbe& p = reg.probe();
  if (p.available) return true;
  ex.respond_error(503, kServiceUnavailable, "isolation unavailable: " + p.message);
  return false;
}

IsolatedSession* require_session(IsolatedRegistry& reg, Exchange& ex) {
  if (!require_isolation(reg, ex)) return nullptr;
  const std::string& id = ex.params.get("id");
  IsolatedSession* s = reg.find(id);
  if (!s) ex.respond_error(404, kSessionNotFound, "session " + id + " not found");
  return s;
}

void add_isolated_routes(RouteTable& routes, IsolatedRegistry& reg, FileService& plain) {
  const std::string base = "/v1/isolated";
  const std::string session = base + "/session/:id";
  routes.add("GET", base + "/capabilities", [&reg](Exchange& ex) { handle_capabilities(reg, ex); });
  routes.add("POST", base + "/session", [&reg](Exchange& ex) { handle_create(reg, ex); }, kStartsProcesses);
  routes.add("GET", base + "/sessions", [&reg](Exchange& ex) { handle_list(reg, ex); });
  routes.add("GET", session, [&reg](Exchange& ex) { handle_get(reg, ex); });
  routes.add("DELETE", session, [&reg](Exchange& ex) { handle_delete(reg, ex); });
  add_isolated_run_routes(routes, session, reg);
  add_layer_routes(routes, session,
                   LayerScope{[&reg](Exchange& ex, LayerSet& set) {
                                IsolatedSession* s = require_session(reg, ex);
                                if (!s) return false;
                                if (s->layers.empty()) {
                                  ex.respond_error(400, codes::kInvalidRequestBody,
                                                   "session " + s->id +
                                                       " has no persistent overlay (mode overlay, persist true): "
                                                       "nothing to diff or commit");
                                  return false;
                                }
                                set.session = s->id;
                                set.layers = s->layers;
                                return true;
                              },
                              plain.gate, reg.ctx().loop});
  // A session's own files: null once the refusal is answered.
  FileServiceFor files = [&reg, &plain](Exchange& ex) -> FileService* {
    IsolatedSession* s = require_session(reg, ex);
    return s ? &session_files(plain, *s) : nullptr;
  };
  add_file_routes(routes, session, files);
  add_upload_route(routes, session, files);
  add_download_route(routes, session, files);
}

}  // namespace execd::api
