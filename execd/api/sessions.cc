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

#include "execd/api/api.h"
#include "execd/api/execution_stream.h"
#include "execd/api/file_jobs.h"
#include "fs/paths.h"
#include "protocol/envelope.h"
#include "protocol/errors.h"
#include "protocol/requests.h"
#include "pty/bash_session.h"
#include "pty/digest.h"
#include "execd/api/journal.h"
#include "execd/api/commands.h"
#include <signal.h>

namespace execd::api {

namespace codes = protocol::codes;
using http::Exchange;

// One run of a session's shell; lives until the next run replaces it or the
// session goes, so BashSession may call it until its last callback.
class SessionRun final : public pty::BashListener, public ExecutionProducer {
 public:
  explicit SessionRun(pty::BashSession* shell) : shell_(shell) {}
  // For the journal.
  Context* ctx = nullptr;
  std::string session_id, command, cwd;
  int64_t started_ns = 0;

  void on_run_output(pty::Stream s, const uint8_t* data, size_t len) override {
    digest_[static_cast<int>(s)].update(data, len);
    if (record) record->on_output(s, data, len);
    if (ExecutionStream* st = stream.get()) st->output(static_cast<protocol::OutputStream>(s), data, len);
  }

  void on_run_finished(const pty::RunOutcome& o) override {
    shell_ = nullptr;
    ExecutionStream* st = stream.get();
    protocol::ExecutionResult r;
    r.exit_code = o.exit_code;
    set_signal(r, o.signal);
    r.timed_out = o.timed_out;
    r.interrupted = o.interrupted;
    r.execution_time_ms = o.duration_ms;
    r.stdout_bytes = digest_[0].bytes();
    r.stderr_bytes = digest_[1].bytes();
    protocol::Sha256Digest sha[2] = {digest_[0].finish(), digest_[1].finish()};
    r.stdout_sha256 = protocol::lower_hex(sha[0]);
    r.stderr_sha256 = protocol::lower_hex(sha[1]);
    journal(r);
    if (record) {
      pty::Outcome out;
      out.exit_code = o.exit_code;
      out.signal = o.signal;
      out.timed_out = o.timed_out;
      out.interrupted = o.interrupted;
      out.duration_ms = o.duration_ms;
      out.bytes[0] = r.stdout_bytes;
      out.bytes[1] = r.stderr_bytes;
      out.sha256[0] = sha[0];
      out.sha256[1] = sha[1];
      CommandRecord* rec = std::exchange(record, nullptr);
      if (ctx && ctx->commands) ctx->commands->finish_external(rec, out);
    }
    if (st) st->finish(r);
  }

  void journal(const protocol::ExecutionResult& r) {
    if (!ctx || !ctx->journal || !ctx->journal->enabled()) return;
    nlohmann::ordered_json e;
    e["type"] = "session_run";
    e["time"] = rfc3339_nano(unix_ns());
    e["session"] = session_id;
    e["command"] = command;
    e["cwd"] = cwd;
    e["uid"] = getuid();
    e["started_at"] = rfc3339_nano(started_ns);
    e["finished_at"] = rfc3339_nano(unix_ns());
    nlohmann::ordered_json out;
    out["exit_code"] = r.exit_code ? nlohmann::ordered_json(*r.exit_code) : nlohmann::ordered_json();
    out["signal"] = r.signal.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(r.signal);
    out["timed_out"] = r.timed_out;
    out["interrupted"] = r.interrupted;
    out["execution_time_ms"] = r.execution_time_ms;
    out["stdout_bytes"] = r.stdout_bytes;
    out["stderr_bytes"] = r.stderr_bytes;
    out["stdout_sha256"] = r.stdout_sha256;
    out["stderr_sha256"] = r.stderr_sha256;
    e["result"] = out;
    ctx->journal->append(e);
  }

  void set_client_paused(bool paused) override {
    if (shell_) shell_->set_paused(paused);
  }
  void client_gone() override {
    // The run goes on. With a record, its output still goes there (for
    // GET /session/{id}/stream): just stop waiting for the client.
    if (record) {
      if (shell_) shell_->set_paused(false);
      return;
    }
    // Without, its output is dropped. (Detaching unpauses the shell,
    // which may complete the run at once: forget the shell first.)
    pty::BashSession* shell = shell_;
    shell_ = nullptr;
    if (shell) shell->detach_listener();
  }
  // The session is going away with the run: a record still open says it was killed.
  void forget_shell() {
    shell_ = nullptr;
    if (CommandRecord* rec = std::exchange(record, nullptr)) {
      pty::Outcome out;
      out.signal = SIGKILL;
      out.bytes[0] = rec->produced[0];
      out.bytes[1] = rec->produced[1];
      if (ctx && ctx->commands) ctx->commands->finish_external(rec, out);
    }
  }
  // The run's command record (resumable by offset), until it finishes.
  CommandRecord* record = nullptr;

 private:
  pty::BashSession* shell_;
  pty::OutputDigest digest_[2];
};

struct SessionEntry {
  std::string id;
  pty::BashSession* shell = nullptr;  // nullptr once destroyed
  bool dead = false;
  std::unique_ptr<SessionRun> run;
  uint64_t runs = 0;
  std::string last_run;  // command record id of the latest run
};

SessionRegistry::SessionRegistry(Context& ctx) : ctx_(ctx) {}

SessionRegistry::~SessionRegistry() {
  for (auto& [id, e] : entries_)
    if (e->run) e->run->forget_shell();
}

SessionEntry* SessionRegistry::create(const std::string& cwd, std::string& error) {
  auto e = std::make_unique<SessionEntry>();
  e->id = random_uuid();
  auto* shell = new pty::BashSession(ctx_.loop, *ctx_.reaper, *ctx_.containment, ctx_.config.state_dir, "session-" + e->id);
  if (!shell->start(ctx_.shell, ctx_.base_env, cwd, error)) {
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
  if (shell && it->second->run) {
    // The run stays registered with the shell until its last callback.
    dying_runs_[shell] = std::move(it->second->run);
  }
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
  dying_runs_.erase(shell);
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
  for (auto& [id, e] : entries_) {
    if (e->run) e->run->forget_shell();
    if (e->shell) shells[e->shell] = true;
  }
  for (auto& [shell, run] : dying_runs_) run->forget_shell();
  for (auto& [shell, unused] : shells) {
    shell->set_on_gone(nullptr);
    shell->destroy();
  }
  entries_.clear();
  dying_runs_.clear();
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
  // `$VAR` and `~` expand with execd's environment; the directory is created
  // (mkdir -p) on the threadpool.
  auto prepared = std::make_shared<WorkingDir>();
  const Context& ctx = reg.ctx();
  run_blocking(
      ctx.loop, ex, [prepared, cwd_in, env = ctx.base_env] { *prepared = make_working_dir(env, cwd_in); },
      [&reg, prepared](Exchange& ex) {
        std::string err = prepared->error;
        SessionEntry* e = err.empty() ? reg.create(prepared->path, err) : nullptr;
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
// listed) on the threadpool; the run starts back on the loop.
void start_run(SessionRegistry& reg, Exchange& ex, const std::string& id, const std::string& command,
               const std::string& cwd, int64_t timeout_ms) {
  if (refuse_run(reg, ex, id)) return;
  struct Job {
    pty::BashSession::PreparedRun prepared;
    std::string problem;
    // A run that never starts (the client left, the session went) leaves no script.
    ~Job() { pty::BashSession::discard(prepared); }
  };
  auto job = std::make_shared<Job>();
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
      [&reg, job, id, command, cwd, timeout_ms](Exchange& ex) {
        if (!job->problem.empty())
          return ex.respond_error(400, codes::kInvalidRequestBody, "invalid request. " + job->problem);
        // The session may have gone or become busy while the job ran.
        if (refuse_run(reg, ex, id)) return;
        SessionEntry* e = reg.find(id);
        auto run = std::make_unique<SessionRun>(e->shell);
        run->ctx = &reg.ctx();
        run->session_id = id;
        run->command = command;
        run->cwd = cwd;
        run->started_ns = unix_ns();
        std::string run_id = id + "." + std::to_string(++e->runs);
        if (reg.ctx().commands) run->record = reg.ctx().commands->create_external(run_id, command);
        std::string err;
        auto status = e->shell->run(std::exchange(job->prepared, {}), cwd, timeout_ms, run.get(), err);
        if (status != pty::BashSession::RunStatus::started) {
          if (run->record) {
            run->record->start_error = err;
            CommandRecord* rec = std::exchange(run->record, nullptr);
            rec->final_result = std::make_unique<protocol::ExecutionResult>(rec->result());
            reg.ctx().commands->finished(rec);
          }
          return ex.respond_error(500, codes::kRuntimeError, "error running in session. " + err);
        }
        if (run->record) e->last_run = run_id;
        e->run = std::move(run);
        auto stream = std::make_unique<ExecutionStream>(ex, framing_for(reg.ctx(), ex));
        ExecutionStream& s = *stream;
        ex.attach(std::move(stream));
        s.start(*e->run, id, {"EXECD-RUN-ID: " + run_id});
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
  start_run(reg, ex, id, command, cwd, timeout_ms);
}

}  // namespace

void add_session_routes(RouteTable& routes, SessionRegistry& sessions) {
  routes.add("POST", "/session", [&sessions](Exchange& ex) { handle_create(sessions, ex); });
  routes.add("POST", "/session/:id/run", [&sessions](Exchange& ex) { handle_run(sessions, ex); });
  routes.add("DELETE", "/session/:id", [&sessions](Exchange& ex) {
    const std::string& id = ex.params.get("id");
    if (!sessions.find(id)) return respond_unknown_session(ex, id);
    sessions.remove(id);
    ex.respond_empty(200);
  });
}

}  // namespace execd::api
