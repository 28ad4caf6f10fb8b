// execd/api/isolated_runs: an isolated session's runs, the routes
//   POST /v1/isolated/session/{id}/run          stream, or 202 {session_id, run_id, started_at}
//   GET  /v1/isolated/session/{id}/runs/{run}   {session_id, run_id, running, exit_code, ...}
//   GET  /v1/isolated/session/{id}/runs/{run}/logs?cursor=N
// decoded with protocol/isolated. A run is an execution of kind
// isolated_run: in the session's shell (foreground) or a process of its own
// in the session's namespaces (background); the session is
// execd/sessions/isolated's.
//
// Decisions: a second foreground run while one is on is 409 SESSION_BUSY
// (upstream queues it); a run on a session whose shell has exited is 410
// SESSION_EXITED (background runs still start while the session's holder
// lives); a client that leaves a foreground run does not stop it (as with
// /command), it stays readable by its id.
#include <utility>

#include "execd/api/api.h"
#include "execd/api/commands.h"
#include "execd/api/isolated.h"
#include "execd/clock.h"
#include "execd/exec/launch.h"
#include "protocol/errors.h"
#include "protocol/isolated.h"

namespace execd::api {

namespace codes = protocol::codes;
using http::Exchange;
using ojson = nlohmann::ordered_json;
using sessions::IsolatedRegistry;
using sessions::IsolatedSession;

namespace {
constexpr size_t kMaxRunLogRead = 16 << 20;  // a page of GET .../logs, as upstream

// The 202 of a background run, once it started.
void respond_accepted(Exchange& ex, const IsolatedSession& s, const exec::Execution& e) {
  ojson j;
  j["session_id"] = s.id;
  j["run_id"] = e.id();
  j["started_at"] = rfc3339_nano(e.started_ns());
  ex.respond(202, "application/json; charset=utf-8", j.dump(), {"EXECD-RUN-ID: " + e.id()});
}

void handle_run(IsolatedRegistry& reg, Exchange& ex) {
  IsolatedSession* s = require_session(reg, ex);
  if (!s) return;
  auto decoded = protocol::decode_isolated_run(ex.request().body);
  if (auto* err = std::get_if<protocol::DecodeError>(&decoded))
    return ex.respond_error(400, codes::kInvalidRequestBody, err->message);
  auto& r = std::get<protocol::IsolatedRunRequest>(decoded);
  for (const auto& root : r.track_changes)
    if (const char* why = sessions::untrackable_root(*s, root))
      return ex.respond_error(400, codes::kInvalidRequestBody, "track_changes: cannot track " + root + ": " + why);
  exec::ExecutionSpec spec = sessions::run_spec(*s, r);
  auto start = r.background ? sessions::background_run(reg, s->id, r, respond_accepted)
                            : sessions::foreground_run(reg, s->id, r, framing_for(reg.ctx(), ex));
  reg.launches().launch(&ex, std::move(spec), std::move(start));
}

// A run of this session, or a 404 already sent.
exec::Execution* require_run(IsolatedRegistry& reg, Exchange& ex) {
  IsolatedSession* s = require_session(reg, ex);
  if (!s) return nullptr;
  const std::string& run = ex.params.get("run");
  exec::Execution* e = reg.executions().find(run);
  if (!e || e->kind() != exec::Kind::isolated_run || e->spec().owner != s->id) {
    ex.respond_error(404, kSessionNotFound, "run " + run + " not found in session " + s->id);
    return nullptr;
  }
  return e;
}

void handle_run_status(IsolatedRegistry& reg, Exchange& ex) {
  exec::Execution* e = require_run(reg, ex);
  if (!e) return;
  ojson j;
  j["session_id"] = e->spec().owner;
  j["run_id"] = e->id();
  j["running"] = !e->done();
  protocol::ExecutionResult r = e->result();
  if (e->done()) {
    if (r.exit_code) j["exit_code"] = *r.exit_code;
    else j["exit_code"] = nullptr;
    if (e->lost()) j["error"] = "lost: execd stopped while the run was going";
    else if (!r.start_error.empty()) j["error"] = r.start_error;
    else if (!r.signal.empty()) j["error"] = "killed by " + r.signal + (r.timed_out ? " (timed out)" : "");
  }
  j["started_at"] = rfc3339_nano(e->started_ns());
  if (e->finished_ns()) j["finished_at"] = rfc3339_nano(e->finished_ns());
  else j["finished_at"] = nullptr;
  ex.respond_json(200, j.dump());
}

void handle_run_logs(IsolatedRegistry& reg, Exchange& ex) {
  exec::Execution* e = require_run(reg, ex);
  if (!e) return;
  respond_logs(ex, *e, kMaxRunLogRead, "EXECD-ISOLATED-TAIL-CURSOR", "EXECD-ISOLATED-LOG-TRUNCATED");
}
}  // namespace

void add_isolated_run_routes(RouteTable& routes, const std::string& session, IsolatedRegistry& reg) {
  routes.add("POST", session + "/run", [&reg](Exchange& ex) { handle_run(reg, ex); }, kStartsProcesses);
  routes.add("GET", session + "/runs/:run", [&reg](Exchange& ex) { handle_run_status(reg, ex); });
  routes.add("GET", session + "/runs/:run/logs", [&reg](Exchange& ex) { handle_run_logs(reg, ex); });
}

}  // namespace execd::api
