// execd/bash_sessions: the /session API on top of pty::BashSession (one
// long-lived bash per session). A SessionEntry is owned by the registry from
// POST /session until DELETE; a RunStream is one run's HTTP response, framed
// exactly like /command (compat or exact, EventEncoder), and frees itself in
// its ping timer's close callback.
//
// Decisions: unknown session -> 404 CONTEXT_NOT_FOUND (also for /run); a
// second concurrent run -> 409 SESSION_BUSY; a run on a session whose shell
// has exited -> 410 SESSION_EXITED (DELETE still works); a client that
// disconnects mid-run does not cancel the run (as with /command): it runs to
// completion or timeout and its output is dropped.
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "execd/event_stream.h"
#include "execd/terminals.h"
#include "protocol/envelope.h"
#include "protocol/errors.h"
#include "pty/bash_session.h"
#include "pty/digest.h"

namespace execd {

namespace codes = protocol::codes;
using protocol::HttpRequest;
using protocol::QueryParams;
using protocol::RouteParams;

namespace {

struct SessionEntry {
  std::string id;
  pty::BashSession* shell = nullptr;  // nullptr once destroyed
  bool dead = false;
};

// Connects one run of a shell to its HTTP response.
class RunStream : public EventStream::Owner, public pty::BashListener {
 public:
  RunStream(pty::BashSession* shell, Connection& conn, protocol::Framing framing)
      : shell_(shell), stream_(new EventStream(conn, framing, this)) {}

  void start(const std::string& session_id) { stream_->start(session_id); }

  // BashListener
  void on_run_output(pty::Stream s, const uint8_t* data, size_t len) override {
    digest_[static_cast<int>(s)].update(data, len);
    if (!stream_) return;
    stream_->output(static_cast<protocol::OutputStream>(s), data, len);
    if (stream_->over_budget() && shell_) shell_->set_paused(true);
  }

  void on_run_finished(const pty::RunOutcome& o) override {
    shell_ = nullptr;
    if (stream_) {
      protocol::ExecutionResult r;
      r.exit_code = o.exit_code;
      set_signal(r, o.signal);
      r.timed_out = o.timed_out;
      r.interrupted = o.interrupted;
      r.execution_time_ms = o.duration_ms;
      r.stdout_bytes = digest_[0].bytes();
      r.stderr_bytes = digest_[1].bytes();
      r.stdout_sha256 = digest_[0].finish_hex();
      r.stderr_sha256 = digest_[1].finish_hex();
      stream_->finish(r);
    }
    delete this;
  }

  // Frees a run that never started.
  void discard() {
    stream_->discard();
    delete this;
  }

  // EventStream::Owner
  void on_stream_writable() override {
    if (shell_ && stream_ && !stream_->over_budget()) shell_->set_paused(false);
  }
  void on_stream_closed() override {
    stream_ = nullptr;
    pty::BashSession* s = shell_;
    shell_ = nullptr;
    if (s) s->detach_listener();  // the run goes on; its output is dropped
    delete this;
  }

 private:
  pty::BashSession* shell_;
  EventStream* stream_;  // frees itself; nullptr once the client is gone
  pty::OutputDigest digest_[2];
};

class SessionRegistry {
 public:
  explicit SessionRegistry(Context& ctx) : ctx_(ctx) {}
  Context& ctx() { return ctx_; }

  SessionEntry* create(const std::string& cwd, std::string& error) {
    auto e = std::make_unique<SessionEntry>();
    e->id = random_uuid();
    auto* shell = new pty::BashSession(ctx_.loop, *ctx_.reaper, ctx_.config.state_dir, "session-" + e->id);
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
  SessionEntry* find(const std::string& id) {
    auto it = entries_.find(id);
    return it == entries_.end() ? nullptr : it->second.get();
  }
  void remove(const std::string& id) {
    auto it = entries_.find(id);
    if (it == entries_.end()) return;
    pty::BashSession* shell = it->second->shell;
    entries_.erase(it);
    if (!shell) return;
    // Everything the session started dies; the shell object goes once the
    // shell has been reaped (a running run's stream ends first, with -1).
    dying_[shell] = true;
    shell->kill_all();
  }

 private:
  void gone(const std::string& id, pty::BashSession* shell) {
    if (auto it = entries_.find(id); it != entries_.end() && it->second->shell == shell) {
      it->second->shell = nullptr;
      it->second->dead = true;
    }
    dying_.erase(shell);
    shell->destroy();
  }

  Context& ctx_;
  std::map<std::string, std::unique_ptr<SessionEntry>> entries_;
  std::map<pty::BashSession*, bool> dying_;

 public:
  void kill_all() {
    for (auto& [id, e] : entries_)
      if (e->shell) e->shell->kill_all();
    for (auto& [shell, unused] : dying_) shell->kill_all();
  }
};

SessionRegistry* g_session_registry = nullptr;

void respond_unknown(Connection& c, const std::string& id) {
  c.respond_error(404, codes::kContextNotFound, "session " + id + " not found");
}

void handle_create(SessionRegistry& reg, Connection& c, HttpRequest& r) {
  std::string cwd_in;
  if (!r.body.empty()) {
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      c.respond_error(400, codes::kInvalidRequestBody, "error parsing request. invalid JSON body");
      return;
    }
    if (auto it = j.find("cwd"); it != j.end() && !it->is_null()) {
      if (!it->is_string()) {
        c.respond_error(400, codes::kInvalidRequestBody, "error parsing request. cwd must be a string");
        return;
      }
      cwd_in = it->get<std::string>();
    }
  }
  std::string cwd, err;
  if (!prepare_session_cwd(reg.ctx(), cwd_in, cwd, err)) {
    c.respond_error(500, codes::kRuntimeError, "error creating session. " + err);
    return;
  }
  SessionEntry* e = reg.create(cwd, err);
  if (!e) {
    c.respond_error(500, codes::kRuntimeError, "error creating session. " + err);
    return;
  }
  spdlog::info("bash session {} started", e->id);
  nlohmann::ordered_json j;
  j["session_id"] = e->id;
  c.respond_json(200, j.dump());
}

void handle_run(SessionRegistry& reg, Connection& c, HttpRequest& r, const std::string& id) {
  auto bad = [&](const std::string& m) { c.respond_error(400, codes::kInvalidRequestBody, "invalid request. " + m); };
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return bad("invalid JSON body");
  std::string command, cwd;
  int64_t timeout_ms = 0;
  if (auto it = j.find("command"); it != j.end() && it->is_string()) command = it->get<std::string>();
  else if (it != j.end() && !it->is_null()) return bad("command must be a string");
  if (command.empty()) return bad("command is required");
  if (auto it = j.find("cwd"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) return bad("cwd must be a string");
    cwd = it->get<std::string>();
  }
  if (auto it = j.find("timeout"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() && !it->is_number_unsigned()) return bad("timeout must be an integer (ms)");
    timeout_ms = it->get<int64_t>();
    if (timeout_ms < 0) return bad("timeout must be >= 0");
  }
  SessionEntry* e = reg.find(id);
  if (!e) return respond_unknown(c, id);
  if (!cwd.empty()) {
    struct stat st;
    if (stat(cwd.c_str(), &st) != 0) return bad("working directory does not exist: " + cwd);
    if (!S_ISDIR(st.st_mode)) return bad("working directory is not a directory: " + cwd);
  }
  if (e->dead || !e->shell || !e->shell->alive()) {
    c.respond_error(410, "SESSION_EXITED", "session " + id + " has exited; delete it and create a new one");
    return;
  }
  if (e->shell->busy()) {
    c.respond_error(409, "SESSION_BUSY", "session " + id + " is already running a command");
    return;
  }
  auto* stream = new RunStream(e->shell, c, framing_for(reg.ctx(), r));
  std::string err;
  auto status = e->shell->run(command, cwd, timeout_ms, stream, err);
  if (status != pty::BashSession::RunStatus::started) {
    // Nothing started; the stream object was never attached to the connection.
    stream->discard();
    c.respond_error(500, codes::kRuntimeError, "error running in session. " + err);
    return;
  }
  stream->start(id);
}

}  // namespace

InterruptResult interrupt_bash_session_run(const std::string& id) {
  SessionEntry* e = g_session_registry ? g_session_registry->find(id) : nullptr;
  if (!e) return InterruptResult::not_found;
  if (!e->shell || !e->shell->interrupt()) return InterruptResult::not_running;
  return InterruptResult::interrupted;
}

void kill_all_bash_sessions() {
  if (g_session_registry) g_session_registry->kill_all();
}

void register_bash_session_routes(Routes& routes, Context& ctx) {
  static SessionRegistry* reg = new SessionRegistry(ctx);  // lives as long as the process
  g_session_registry = reg;
  routes.add("POST", "/session", [](Connection& c, HttpRequest& r, const RouteParams&, const QueryParams&) {
    handle_create(*reg, c, r);
  });
  routes.add("POST", "/session/:id/run", [](Connection& c, HttpRequest& r, const RouteParams& p, const QueryParams&) {
    handle_run(*reg, c, r, p.get("id"));
  });
  routes.add("DELETE", "/session/:id", [](Connection& c, HttpRequest&, const RouteParams& p, const QueryParams&) {
    if (!reg->find(p.get("id"))) return respond_unknown(c, p.get("id"));
    reg->remove(p.get("id"));
    c.respond_empty(200);
  });
}

}  // namespace execd
