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
#include "execd/exec/reader.h"
#include "execd/http/awaiter.h"
#include "execd/ids.h"
#include "execd/limits.h"
#include "execd/runners/command.h"
#include "execd/runners/session.h"
#include "protocol/errors.h"
#include "protocol/isolated.h"
#include "pty/bash_session.h"

namespace execd::api {

namespace codes = protocol::codes;
using http::Exchange;
using ojson = nlohmann::ordered_json;
using sessions::IsolatedRegistry;
using sessions::IsolatedSession;

namespace {
constexpr size_t kMaxRunLogRead = 16 << 20;  // a page of GET .../logs, as upstream

// --- runs --------------------------------------------------------------------------

std::string shell_quote(const std::string& v) {
  std::string out = "'";
  for (char c : v) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

void start_background(IsolatedRegistry& reg, IsolatedSession& s, Exchange& ex, protocol::IsolatedRunRequest& r,
                      std::unique_ptr<exec::ChangeTracker> tracker) {
  const Context& ctx = reg.ctx();
  exec::ExecutionSpec spec;
  spec.kind = exec::Kind::isolated_run;
  spec.id = random_uuid();
  spec.content = r.code;
  spec.fingerprint = "isolated-run";
  spec.cwd = s.cwd;
  spec.uid = s.run_uid;
  spec.gid = s.run_gid;
  spec.background = true;
  spec.owner = s.id;
  spec.track_changes = r.track_changes;
  exec::Execution& e = reg.executions().create(std::move(spec));
  if (tracker) e.track(std::move(tracker));
  pty::SpawnOptions opts;
  opts.program = ctx.shell;
  opts.argv = {ctx.shell, "-c", r.code};
  opts.env = s.env;
  for (const auto& [k, v] : r.envs) pty::set_env(opts.env, k, v);
  opts.cwd = s.cwd;
  opts.uid = s.run_uid;
  opts.gid = s.run_gid;
  opts.isolated = &s.entry;
  pty::CommandLimits limits;  // not time-limited, as upstream
  limits.kill_grace_ms = ctx.config.kill_grace_ms;
  std::string err;
  auto runner = runners::CommandRunner::start(reg.runtime(), opts, limits, false, e, err);
  if (!runner) {
    e.fail_start(err);
    return ex.respond_error(500, codes::kRuntimeError, "cannot start the run: " + err);
  }
  s.background.push_back(e.id());
  s.last_run_ns = unix_ns();
  e.start(std::move(runner));
  ojson j;
  j["session_id"] = s.id;
  j["run_id"] = e.id();
  j["started_at"] = rfc3339_nano(e.started_ns());
  ex.respond(202, "application/json; charset=utf-8", j.dump(), {"EXECD-RUN-ID: " + e.id()});
}

const char* refuse_foreground(IsolatedRegistry& reg, Exchange& ex, const std::string& id) {
  IsolatedSession* s = reg.find(id);
  if (!s) return ex.respond_error(404, kSessionNotFound, "session " + id + " not found"), "";
  if (s->dead())
    return ex.respond_error(410, "SESSION_EXITED", "session " + id + " has exited; delete it and create a new one"), "";
  if (s->shell->busy())
    return ex.respond_error(409, "SESSION_BUSY", "session " + id + " is already running a foreground run"), "";
  return nullptr;
}

void start_foreground(IsolatedRegistry& reg, IsolatedSession& s, Exchange& ex, protocol::IsolatedRunRequest& r,
                      std::unique_ptr<exec::ChangeTracker> tracker) {
  if (refuse_foreground(reg, ex, s.id)) return;
  // envs: exported in a subshell for this run only (as upstream).
  std::string code = r.code;
  if (!r.envs.empty()) {
    std::string wrapped = "(\n";
    for (const auto& [k, v] : r.envs) wrapped += "export " + k + "=" + shell_quote(v) + "\n";
    wrapped += code;
    if (wrapped.back() != '\n') wrapped += '\n';
    code = wrapped + ")";
  }
  int64_t timeout_ms = r.timeout_seconds * 1000;
  struct Job {
    pty::BashSession::PreparedRun prepared;
    ~Job() { pty::BashSession::discard(prepared); }
  };
  auto job = std::make_shared<Job>();
  std::optional<std::pair<uid_t, gid_t>> owner;
  if (s.run_uid) owner = std::pair<uid_t, gid_t>{*s.run_uid, s.run_gid.value_or(*s.run_uid)};
  std::string id = s.id, content = r.code;
  auto tracked = std::make_shared<std::unique_ptr<exec::ChangeTracker>>(std::move(tracker));
  run_blocking(
      reg.ctx().loop, ex,
      [job, file = s.shell->next_run_file(), pid = s.shell->shell_pid(), code, timeout_ms, owner] {
        job->prepared = pty::BashSession::prepare_run(file, pid, code, timeout_ms, owner);
      },
      [&reg, job, id, content, timeout_ms, tracked, track = r.track_changes](Exchange& ex) {
        if (refuse_foreground(reg, ex, id)) return;
        if (!admit(ex, reg.executions().running(), reg.ctx().config.max_running, "running executions", "max-running"))
          return;
        IsolatedSession& s = *reg.find(id);
        exec::ExecutionSpec spec;
        spec.kind = exec::Kind::isolated_run;
        spec.id = random_uuid();
        spec.content = content;
        spec.fingerprint = "isolated-run";
        spec.uid = s.run_uid;
        spec.gid = s.run_gid;
        spec.owner = id;
        spec.track_changes = track;
        exec::Execution& run = reg.executions().create(std::move(spec));
        if (*tracked) run.track(std::move(*tracked));
        auto runner = std::make_unique<runners::SessionRunner>(run, *s.shell);
        std::string err;
        auto status = s.shell->run(std::exchange(job->prepared, {}), "", timeout_ms, runner.get(), err);
        if (status != pty::BashSession::RunStatus::started) {
          run.fail_start(err);
          return ex.respond_error(500, codes::kRuntimeError, "error running in the session: " + err);
        }
        s.last_run_ns = unix_ns();
        ex.attach(std::make_unique<exec::ExecutionReader>(ex, run, exec::ExecutionReader::Role::original,
                                                          framing_for(reg.ctx(), ex), 0, 0,
                                                          std::vector<std::string>{"EXECD-RUN-ID: " + run.id()}));
        run.start(std::move(runner));
      });
}

struct IsolatedTrackWait : http::Awaitable {};

void dispatch_run(IsolatedRegistry& reg, IsolatedSession& s, Exchange& ex, protocol::IsolatedRunRequest& r,
                  std::unique_ptr<exec::ChangeTracker> tracker) {
  if (!r.background) return start_foreground(reg, s, ex, r, std::move(tracker));
  if (!s.holder_alive)
    return ex.respond_error(410, "SESSION_EXITED", "session " + s.id + " has exited; delete it and create a new one");
  if (!admit(ex, reg.executions().running(), reg.ctx().config.max_running, "running executions", "max-running")) return;
  start_background(reg, s, ex, r, std::move(tracker));
}

void handle_run(IsolatedRegistry& reg, Exchange& ex) {
  IsolatedSession* s = require_session(reg, ex);
  if (!s) return;
  auto decoded = protocol::decode_isolated_run(ex.request().body);
  if (auto* err = std::get_if<protocol::DecodeError>(&decoded))
    return ex.respond_error(400, codes::kInvalidRequestBody, err->message);
  auto& r = std::get<protocol::IsolatedRunRequest>(decoded);
  if (!reg.executions().accepting()) return ex.respond_error(503, codes::kRuntimeError, "execd is shutting down");
  if (r.track_changes.empty()) return dispatch_run(reg, *s, ex, r, nullptr);
  for (const auto& root : r.track_changes)
    if (const char* why = untrackable_root(*s, root))
      return ex.respond_error(400, codes::kInvalidRequestBody, "track_changes: cannot track " + root + ": " + why);
  // The watches on the roots first; the session is looked up again after.
  auto wait = std::make_shared<IsolatedTrackWait>();
  http::await(ex, *wait);
  auto req = std::make_shared<protocol::IsolatedRunRequest>(std::move(r));
  exec::ChangeTracker::open(reg.watches(), req->track_changes, track_limits(reg.ctx()),
                            [&reg, wait, req, id = s->id](std::unique_ptr<exec::ChangeTracker> t,
                                                          std::optional<protocol::ApiError> err) {
                              Exchange* ex = wait->exchange();
                              if (!ex) return;
                              if (err) return ex->respond_error(err->status, err->code, "track_changes: " + err->message);
                              IsolatedSession* s = reg.find(id);
                              if (!s) return ex->respond_error(404, kSessionNotFound, "session " + id + " not found");
                              dispatch_run(reg, *s, *ex, *req, std::move(t));
                            },
                            s->mount);
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
