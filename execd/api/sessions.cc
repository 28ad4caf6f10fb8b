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

#include "execd/api/pause.h"
#include "execd/http/awaiter.h"
#include "execd/api/commands.h"
#include "execd/api/api.h"  // FileService, run_file_job (execd/files) as api:: names
#include "execd/ids.h"
#include "execd/limits.h"
#include "execd/exec/formats.h"
#include "execd/exec/launch.h"
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
using sessions::InterruptResult;
using sessions::SessionEntry;
using sessions::SessionRegistry;

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

// What a session run brings to a launch (exec/launch): the session must be
// there, alive and idle when it is asked for and again when it starts; its
// script is written (and, with a timeout, the session's processes listed)
// on the threadpool; it runs in the session's shell.
class SessionRunStart final : public exec::RunStart {
 public:
  SessionRunStart(SessionRegistry& reg, std::string session, std::string command, std::string cwd, int64_t timeout_ms,
                  protocol::Framing framing)
      : reg_(reg), session_(std::move(session)), command_(std::move(command)), cwd_(std::move(cwd)),
        timeout_ms_(timeout_ms), framing_(framing) {
    pty::BashSession* shell = reg_.find(session_)->shell;
    file_ = shell->next_run_file();
    shell_pid_ = shell->shell_pid();
  }
  // A run that never starts (the client left, the session went) leaves no script.
  ~SessionRunStart() override { pty::BashSession::discard(prepared_); }

  std::optional<protocol::ApiError> admission() override { return refusal(reg_, session_); }
  bool prepare_blocks() const override { return true; }
  std::optional<protocol::ApiError> prepare() override {
    if (!cwd_.empty()) {
      struct stat st;
      if (stat(cwd_.c_str(), &st) != 0) return bad_request("working directory does not exist: " + cwd_);
      if (!S_ISDIR(st.st_mode)) return bad_request("working directory is not a directory: " + cwd_);
    }
    prepared_ = pty::BashSession::prepare_run(file_, shell_pid_, command_, timeout_ms_);
    return std::nullopt;
  }
  // The session may have gone or become busy while the jobs ran.
  std::optional<protocol::ApiError> recheck() override { return refusal(reg_, session_); }
  std::unique_ptr<exec::StreamFormat> stream_format(http::Exchange& client) override {
    return exec::envelope_format(framing_);
  }
  bool start_failure_refuses() const override { return true; }
  std::unique_ptr<exec::Runner> start(exec::Execution& e, std::string& error) override {
    SessionEntry* entry = reg_.find(session_);
    auto runner = std::make_unique<runners::SessionRunner>(e, *entry->shell);
    auto status = entry->shell->run(std::exchange(prepared_, {}), cwd_, timeout_ms_, runner.get(), error);
    if (status == pty::BashSession::RunStatus::started) return runner;
    error = "error running in session. " + error;
    return nullptr;
  }
  void started(exec::Execution& e, http::Exchange*) override { reg_.find(session_)->last_run = e.id(); }

  // Why `id` cannot take a run now, or nothing.
  static std::optional<protocol::ApiError> refusal(SessionRegistry& reg, const std::string& id) {
    SessionEntry* e = reg.find(id);
    if (!e) return protocol::ApiError{404, std::string(codes::kContextNotFound), "session " + id + " not found"};
    if (e->dead || !e->shell || !e->shell->alive())
      return protocol::ApiError{410, "SESSION_EXITED", "session " + id + " has exited; delete it and create a new one"};
    if (e->shell->busy())
      return protocol::ApiError{409, "SESSION_BUSY", "session " + id + " is already running a command"};
    return std::nullopt;
  }

 private:
  static protocol::ApiError bad_request(const std::string& why) {
    return {400, std::string(codes::kInvalidRequestBody), "invalid request. " + why};
  }

  SessionRegistry& reg_;
  std::string session_, command_, cwd_;
  int64_t timeout_ms_;
  protocol::Framing framing_;
  std::string file_;
  pid_t shell_pid_;
  pty::BashSession::PreparedRun prepared_;
};

void handle_run(SessionRegistry& reg, Exchange& ex) {
  const std::string id = ex.params.get("id");
  auto decoded = protocol::decode_session_run(ex.request().body);
  if (auto* err = std::get_if<protocol::DecodeError>(&decoded))
    return ex.respond_error(400, codes::kInvalidRequestBody, "invalid request. " + err->message);
  auto& r = std::get<protocol::SessionRunRequest>(decoded);
  if (auto why = SessionRunStart::refusal(reg, id)) return ex.respond_error(why->status, why->code, why->message);
  SessionEntry* e = reg.find(id);
  exec::ExecutionSpec spec;
  spec.kind = exec::Kind::session_run;
  spec.id = id + "." + std::to_string(++e->runs);
  spec.content = r.command;
  spec.fingerprint = "session-run";
  spec.cwd = r.cwd;
  spec.owner = id;
  spec.track_changes = std::move(r.track_changes);
  reg.launches().launch(&ex, std::move(spec),
                        std::make_unique<SessionRunStart>(reg, id, std::move(r.command), std::move(r.cwd), r.timeout_ms,
                                                          framing_for(reg.ctx(), ex)));
}

}  // namespace

void add_session_routes(RouteTable& routes, sessions::SessionRegistry& sessions) {
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
