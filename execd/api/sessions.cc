// execd/api/sessions: see header.
//
// Decisions: unknown session -> 404 CONTEXT_NOT_FOUND (also for /run); a
// second concurrent run -> 409 SESSION_BUSY; a run on a session whose shell
// has exited -> 410 SESSION_EXITED (DELETE still works); a client that
// disconnects mid-run does not cancel the run (as with /command): it runs to
// completion or timeout and its output is dropped.
#include "execd/api/sessions.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <utility>
#include <variant>

#include "execd/api/activity.h"
#include "execd/api/awaiter.h"
#include "execd/api/commands.h"
#include "execd/api/file_jobs.h"
#include "execd/ids.h"
#include "execd/limits.h"
#include "execd/exec/reader.h"
#include "execd/runners/command_spawn.h"
#include "execd/runners/session.h"
#include "fs/paths.h"
#include "protocol/envelope.h"
#include "protocol/errors.h"
#include "protocol/requests.h"
#include "pty/bash_session.h"


namespace execd::api {

namespace codes = protocol::codes;
using http::Exchange;

SessionRegistry::SessionRegistry(const Context& ctx, pty::Runtime& runtime, exec::Registry& executions,
                                 watch::Hub& watches)
    : ctx_(ctx), runtime_(runtime), executions_(executions), watches_(watches) {}

size_t SessionRegistry::busy() const {
  size_t n = 0;
  for (const auto& [id, e] : entries_)
    if (e->shell && e->shell->busy()) ++n;
  return n;
}

SessionRegistry::~SessionRegistry() = default;

SessionEntry* SessionRegistry::create(const std::string& cwd, const std::vector<std::string>& env, std::string& error) {
  auto e = std::make_unique<SessionEntry>();
  e->id = random_uuid();
  auto* shell = new pty::BashSession(runtime_, ctx_.config.state_dir, "session-" + e->id);
  if (!shell->start(ctx_.shell, env, cwd, error)) {
    shell->destroy();
    return nullptr;
  }
  SessionEntry* raw = e.get();
  e->shell = shell;
  shell->set_on_gone([this, id = raw->id, shell] { gone(id, shell); });
  entries_[raw->id] = std::move(e);
  return raw;
}

std::string SessionRegistry::latest_run(const std::string& id) {
  SessionEntry* e = find(id);
  return e ? e->last_run : std::string();
}

SessionEntry* SessionRegistry::find(const std::string& id) {
  auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : it->second.get();
}

void SessionRegistry::remove(const std::string& id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  pty::BashSession* shell = it->second->shell;
  // A run still on stays registered with the shell until its last callback,
  // which reports the shell's death.
  entries_.erase(it);
  if (!shell) return;
  // Everything the session started dies; the shell object goes once the
  // shell has been reaped (a running run's stream ends first, with -1).
  dying_[shell] = true;
  shell->kill_all();
}

void SessionRegistry::gone(const std::string& id, pty::BashSession* shell) {
  if (auto it = entries_.find(id); it != entries_.end() && it->second->shell == shell) {
    it->second->shell = nullptr;
    it->second->dead = true;
  }
  dying_.erase(shell);
  shell->destroy();
}

InterruptResult SessionRegistry::interrupt_run(const std::string& id) {
  SessionEntry* e = find(id);
  if (!e) return InterruptResult::not_found;
  if (!e->shell || !e->shell->interrupt()) return InterruptResult::not_running;
  return InterruptResult::interrupted;
}

void SessionRegistry::kill_all() {
  for (auto& [id, e] : entries_)
    if (e->shell) e->shell->kill_all();
  for (auto& [shell, unused] : dying_) shell->kill_all();
}

void SessionRegistry::clear() {
  std::map<pty::BashSession*, bool> shells = std::move(dying_);
  for (auto& [id, e] : entries_)
    if (e->shell) shells[e->shell] = true;
  for (auto& [shell, unused] : shells) {
    shell->set_on_gone(nullptr);
    shell->destroy();
  }
  entries_.clear();
}

namespace {

void respond_unknown_session(Exchange& ex, const std::string& id) {
  ex.respond_error(404, codes::kContextNotFound, "session " + id + " not found");
}

void handle_create(SessionRegistry& reg, Exchange& ex) {
  auto decoded = protocol::decode_session_create(ex.request().body);
  if (auto* err = std::get_if<protocol::DecodeError>(&decoded))
    return ex.respond_error(400, codes::kInvalidRequestBody, "error parsing request. " + err->message);
  std::string cwd_in = std::get<protocol::SessionCreateRequest>(decoded).cwd;
  // A shell, its pipes and its status channel.
  if (!admit(ex, reg.count(), reg.ctx().config.max_sessions, "bash sessions", "max-sessions") ||
      !admit_descriptors(ex, 8, "a bash session"))
    return;
  // `$VAR` and `~` expand with execd's environment; the directory is created
  // (mkdir -p) and the EXECD_ENVS file read on the threadpool.
  struct Prepared {
    WorkingDir dir;
    std::vector<std::string> env;
  };
  auto prepared = std::make_shared<Prepared>();
  const Context& ctx = reg.ctx();
  run_blocking(
      ctx.loop, ex,
      [prepared, cwd_in, &ctx] {
        prepared->dir = make_working_dir(ctx.base_env, cwd_in);
        prepared->env = runners::environment_with_env_file(ctx);
      },
      [&reg, prepared](Exchange& ex) {
        std::string err = prepared->dir.error;
        SessionEntry* e = err.empty() ? reg.create(prepared->dir.path, prepared->env, err) : nullptr;
        if (!e) return ex.respond_error(500, codes::kRuntimeError, "error creating session. " + err);
        spdlog::info("bash session {} started", e->id);
        nlohmann::ordered_json j;
        j["session_id"] = e->id;
        ex.respond_json(200, j.dump());
      });
}

// Refuses a run the session cannot take now; nullptr if it can.
const char* refuse_run(SessionRegistry& reg, Exchange& ex, const std::string& id) {
  SessionEntry* e = reg.find(id);
  if (!e) return respond_unknown_session(ex, id), "";
  if (e->dead || !e->shell || !e->shell->alive())
    return ex.respond_error(410, "SESSION_EXITED", "session " + id + " has exited; delete it and create a new one"), "";
  if (e->shell->busy())
    return ex.respond_error(409, "SESSION_BUSY", "session " + id + " is already running a command"), "";
  return nullptr;
}

// The run's script is written (and, with a timeout, the session's processes
// listed) on the threadpool; with track_changes the watches on its roots are
// made next; the run starts back on the loop.
struct PreparedSessionRun {
  pty::BashSession::PreparedRun prepared;
  std::string problem;
  // A run that never starts (the client left, the session went) leaves no script.
  ~PreparedSessionRun() { pty::BashSession::discard(prepared); }
};

struct SessionTrackWait : Awaitable {};

void begin_run(SessionRegistry& reg, Exchange& ex, const std::shared_ptr<PreparedSessionRun>& job,
               const std::string& id, const std::string& command, const std::string& cwd, int64_t timeout_ms,
               const std::vector<std::string>& track, std::unique_ptr<exec::ChangeTracker> tracker) {
  // The session may have gone or become busy while the jobs ran.
  if (refuse_run(reg, ex, id)) return;
  if (!admit(ex, reg.executions().running(), reg.ctx().config.max_running, "running executions", "max-running"))
    return;
  if (!track.empty() && !tracker) {
    auto wait = std::make_shared<SessionTrackWait>();
    await(ex, *wait);
    exec::ChangeTracker::open(
        reg.watches(), track, track_limits(reg.ctx()),
        [&reg, wait, job, id, command, cwd, timeout_ms, track](std::unique_ptr<exec::ChangeTracker> t,
                                                               std::optional<protocol::ApiError> err) {
          Exchange* ex = wait->exchange();
          if (!ex) return;
          if (err) return ex->respond_error(err->status, err->code, "track_changes: " + err->message);
          begin_run(reg, *ex, job, id, command, cwd, timeout_ms, track, std::move(t));
        });
    return;
  }
  SessionEntry* e = reg.find(id);
  exec::ExecutionSpec spec;
  spec.kind = exec::Kind::session_run;
  spec.id = id + "." + std::to_string(++e->runs);
  spec.content = command;
  spec.fingerprint = "session-run";
  spec.cwd = cwd;
  spec.owner = id;
  spec.track_changes = track;
  exec::Execution& run = reg.executions().create(std::move(spec));
  if (tracker) run.track(std::move(tracker));
  auto runner = std::make_unique<runners::SessionRunner>(run, *e->shell);
  std::string err;
  auto status = e->shell->run(std::exchange(job->prepared, {}), cwd, timeout_ms, runner.get(), err);
  if (status != pty::BashSession::RunStatus::started) {
    run.fail_start(err);
    return ex.respond_error(500, codes::kRuntimeError, "error running in session. " + err);
  }
  e->last_run = run.id();
  ex.attach(std::make_unique<exec::ExecutionReader>(ex, run, exec::ExecutionReader::Role::original,
                                                    framing_for(reg.ctx(), ex), 0, 0,
                                                    std::vector<std::string>{"EXECD-RUN-ID: " + run.id()}));
  run.start(std::move(runner));
}

void start_run(SessionRegistry& reg, Exchange& ex, const std::string& id, const std::string& command,
               const std::string& cwd, int64_t timeout_ms, std::vector<std::string> track) {
  if (refuse_run(reg, ex, id)) return;
  auto job = std::make_shared<PreparedSessionRun>();
  pty::BashSession* shell = reg.find(id)->shell;
  run_blocking(
      reg.ctx().loop, ex,
      [job, file = shell->next_run_file(), pid = shell->shell_pid(), command, cwd, timeout_ms] {
        if (!cwd.empty()) {
          struct stat st;
          if (stat(cwd.c_str(), &st) != 0) return void(job->problem = "working directory does not exist: " + cwd);
          if (!S_ISDIR(st.st_mode)) return void(job->problem = "working directory is not a directory: " + cwd);
        }
        job->prepared = pty::BashSession::prepare_run(file, pid, command, timeout_ms);
      },
      [&reg, job, id, command, cwd, timeout_ms, track = std::move(track)](Exchange& ex) {
        if (!job->problem.empty())
          return ex.respond_error(400, codes::kInvalidRequestBody, "invalid request. " + job->problem);
        begin_run(reg, ex, job, id, command, cwd, timeout_ms, track, nullptr);
      });
}

void handle_run(SessionRegistry& reg, Exchange& ex) {
  const std::string id = ex.params.get("id");
  auto decoded = protocol::decode_session_run(ex.request().body);
  if (auto* err = std::get_if<protocol::DecodeError>(&decoded))
    return ex.respond_error(400, codes::kInvalidRequestBody, "invalid request. " + err->message);
  auto& r = std::get<protocol::SessionRunRequest>(decoded);
  std::string command = std::move(r.command), cwd = std::move(r.cwd);
  int64_t timeout_ms = r.timeout_ms;
  start_run(reg, ex, id, command, cwd, timeout_ms, std::move(r.track_changes));
}

}  // namespace

void add_session_routes(RouteTable& routes, SessionRegistry& sessions) {
  routes.add("POST", "/session", [&sessions](Exchange& ex) { handle_create(sessions, ex); }, kStartsProcesses);
  routes.add("POST", "/session/:id/run", [&sessions](Exchange& ex) { handle_run(sessions, ex); }, kStartsProcesses);
  routes.add("DELETE", "/session/:id", [&sessions](Exchange& ex) {
    const std::string& id = ex.params.get("id");
    if (!sessions.find(id)) return respond_unknown_session(ex, id);
    sessions.remove(id);
    ex.respond_empty(200);
  });
}

}  // namespace execd::api
