// execd/api/commands: see header.
#include "execd/api/commands.h"

#include <grp.h>
#include <pwd.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "fs/expand.h"
#include "execd/api/api.h"
#include "execd/api/awaiter.h"
#include "execd/api/sessions.h"
#include "protocol/errors.h"
#include "protocol/requests.h"
#include "pty/log_cursor.h"

namespace execd::api {

using protocol::ApiError;
namespace codes = protocol::codes;

// ---------------------------------------------------------------------------
// Records

CommandRecord::~CommandRecord() {
  if (cmd) cmd->release();
}

void CommandRecord::on_output(pty::Stream s, const uint8_t* data, size_t len) {
  if (log) log->append(data, len);
  if (stream) stream->output(static_cast<protocol::OutputStream>(s), data, len);
  if (log && log->over_budget()) update_pause();
}

void CommandRecord::update_pause() {
  if (cmd) cmd->set_paused(client_paused || (log && log->over_budget()));
}

void CommandRecord::set_client_paused(bool paused) {
  client_paused = paused;
  update_pause();
}

void CommandRecord::client_gone() {
  client_paused = false;
  update_pause();
}

void CommandRecord::on_finished(const pty::Outcome& o) {
  outcome = o;
  finished_ns = unix_ns();
  if (ExecutionStream* s = stream.get()) s->finish(result());
  registry.finished(this);
}

protocol::ExecutionResult CommandRecord::result() const {
  protocol::ExecutionResult r;
  r.start_error = start_error;
  if (!outcome) return r;
  const pty::Outcome& o = *outcome;
  r.exit_code = o.exit_code;
  set_signal(r, o.signal);
  r.timed_out = o.timed_out;
  r.interrupted = o.interrupted;
  r.execution_time_ms = o.duration_ms;
  r.stdout_bytes = o.bytes[0];
  r.stderr_bytes = o.bytes[1];
  r.stdout_sha256 = o.sha256[0];
  r.stderr_sha256 = o.sha256[1];
  r.user_cpu_ms = o.user_cpu_ms;
  r.system_cpu_ms = o.system_cpu_ms;
  r.max_rss_kib = o.max_rss_kib;
  return r;
}

std::string CommandRecord::status_json() const {
  nlohmann::ordered_json j;
  j["id"] = id;
  j["content"] = content;
  bool running = !outcome && start_error.empty();
  j["running"] = running;
  if (!running) {
    protocol::ExecutionResult r = result();
    if (!start_error.empty()) {
      j["exit_code"] = 255;
      j["error"] = start_error;
    } else if (r.exit_code) {
      j["exit_code"] = *r.exit_code;
      if (*r.exit_code != 0) j["error"] = "exit status " + std::to_string(*r.exit_code);
    } else {
      j["exit_code"] = -1;
      j["error"] = "signal: " + r.signal_text;
    }
  }
  j["started_at"] = rfc3339_nano(started_ns);
  if (finished_ns) j["finished_at"] = rfc3339_nano(finished_ns);
  // Beyond the Go daemon: the structured result once finished.
  j["background"] = background;
  if (outcome) {
    protocol::ExecutionResult r = result();
    j["signal"] = r.signal.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(r.signal);
    j["timed_out"] = r.timed_out;
    j["interrupted"] = r.interrupted;
    j["execution_time"] = r.execution_time_ms;
    j["stdout_bytes"] = r.stdout_bytes;
    j["stderr_bytes"] = r.stderr_bytes;
  }
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

CommandRegistry::CommandRegistry(Context& ctx) : ctx_(ctx) {
  uv_timer_init(ctx.loop, &sweep_timer_);
  sweep_timer_.data = this;
  sweep_period_ = static_cast<uint64_t>(std::clamp<int64_t>(ctx.config.retention_ms / 4, 100, 10000));
  uv_timer_start(&sweep_timer_, on_sweep, sweep_period_, sweep_period_);
  uv_unref(reinterpret_cast<uv_handle_t*>(&sweep_timer_));
}

CommandRegistry::~CommandRegistry() = default;

void CommandRegistry::close() {
  uv_close(reinterpret_cast<uv_handle_t*>(&sweep_timer_), nullptr);
  for (auto& [id, rec] : records_) {
    if (rec->cmd) rec->cmd->release();
    rec->cmd = nullptr;
    if (rec->log) rec->log->remove();
  }
}

CommandRecord* CommandRegistry::create(std::string content, bool background) {
  auto rec = std::make_unique<CommandRecord>(*this);
  rec->id = random_id32();
  rec->content = std::move(content);
  rec->background = background;
  rec->started_ns = unix_ns();
  rec->log = std::make_unique<OutputLog>(ctx_.loop, ctx_.config.state_dir + "/" + rec->id + ".output",
                                         static_cast<uint64_t>(ctx_.config.log_limit_bytes));
  CommandRecord* raw = rec.get();
  raw->log->set_on_written([raw] { raw->update_pause(); });
  records_[raw->id] = std::move(rec);
  ++running_;
  return raw;
}

CommandRecord* CommandRegistry::find(const std::string& id) {
  auto it = records_.find(id);
  return it == records_.end() ? nullptr : it->second.get();
}

void CommandRegistry::finished(CommandRecord* r) {
  --running_;
  if (r->cmd) {
    r->cmd->release();
    r->cmd = nullptr;
  }
  if (r->finished_ns == 0) r->finished_ns = unix_ns();
  finished_order_.push_back(r->id);
  // Swept from the timer, never from inside the command's own callback.
  if (finished_order_.size() > ctx_.config.max_records) uv_timer_start(&sweep_timer_, on_sweep, 0, sweep_period_);
}

void CommandRegistry::sweep() {
  int64_t now = unix_ns();
  while (!finished_order_.empty()) {
    auto it = records_.find(finished_order_.front());
    if (it == records_.end()) {
      finished_order_.pop_front();
      continue;
    }
    bool expired = now - it->second->finished_ns >= ctx_.config.retention_ms * 1000000;
    if (!expired && finished_order_.size() <= ctx_.config.max_records) break;
    // A read or write of the retained log in flight points at it: next sweep.
    if (it->second->log && it->second->log->busy()) break;
    if (it->second->log) it->second->log->remove();
    records_.erase(it);
    finished_order_.pop_front();
  }
}

void CommandRegistry::signal_all(int sig) {
  for (auto& [id, rec] : records_)
    if (rec->cmd && rec->cmd->running()) rec->cmd->signal_group(sig);
}

// ---------------------------------------------------------------------------
// Preparing a command: everything that may block (stat, passwd and group
// lookups, reading the EXECD_ENVS file) runs on the threadpool.

namespace {

struct PrepareWork : Awaitable {
  uv_work_t work;
  CommandRegistry* reg;
  protocol::CommandRequest req;
  protocol::Framing framing;
  // results
  pty::SpawnOptions opts;
  std::optional<ApiError> error;
};

void set_env(std::vector<std::string>& env, const std::string& key, const std::string& value) {
  std::string prefix = key + "=";
  for (auto& kv : env)
    if (kv.compare(0, prefix.size(), prefix) == 0) {
      kv = prefix + value;
      return;
    }
  env.push_back(prefix + value);
}

// EXECD_ENVS: KEY=VALUE lines, '#' comments and blank lines skipped, values
// $VAR-expanded against execd's environment, no quote processing.
void apply_env_file(const std::string& path, const std::vector<std::string>& base, std::vector<std::string>& env) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos || eq <= start) continue;
    std::string key = line.substr(start, eq - start);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    std::string value;
    std::string err;
    if (!fs::expand_vars(line.substr(eq + 1), [&](std::string_view n) { return env_lookup(base, n); }, value, err,
                         /*allow_undefined=*/true))
      continue;
    set_env(env, key, value);
  }
}

void prepare(uv_work_t* work) {
  auto* w = static_cast<PrepareWork*>(work->data);
  Context& ctx = w->reg->ctx();
  const auto& req = w->req;
  auto& opts = w->opts;
  std::vector<std::string> env = ctx.base_env;
  if (const char* envs_file = env_lookup(ctx.base_env, "EXECD_ENVS"); envs_file && *envs_file)
    apply_env_file(envs_file, ctx.base_env, env);

  if (req.uid) {
    struct passwd pw, *found = nullptr;
    std::vector<char> buf(16384);
    getpwuid_r(*req.uid, &pw, buf.data(), buf.size(), &found);
    gid_t gid = req.gid ? *req.gid : (found ? found->pw_gid : static_cast<gid_t>(*req.uid));
    opts.uid = *req.uid;
    opts.gid = gid;
    if (found) {
      int n = 64;
      std::vector<gid_t> groups(static_cast<size_t>(n));
      if (getgrouplist(found->pw_name, gid, groups.data(), &n) < 0) {
        groups.resize(static_cast<size_t>(n));
        getgrouplist(found->pw_name, gid, groups.data(), &n);
      }
      groups.resize(static_cast<size_t>(n));
      opts.groups = groups;
      set_env(env, "HOME", found->pw_dir);
      set_env(env, "USER", found->pw_name);
      set_env(env, "LOGNAME", found->pw_name);
    } else {
      // No passwd entry: no supplementary groups, and never root's group by
      // accident (the Go daemon ran such commands with gid 0).
      opts.groups = {gid};
      set_env(env, "HOME", "/");
    }
  }
  for (const auto& [k, v] : req.envs) set_env(env, k, v);

  if (!req.cwd.empty()) {
    // Expanded with the same variables the command will see (the Go daemon
    // validated with one set and ran with another).
    std::string cwd, err;
    auto lookup = [&](std::string_view n) { return env_lookup(env, n); };
    if (!fs::expand_vars(req.cwd, lookup, cwd, err, false)) {
      w->error = ApiError{400, std::string(codes::kInvalidRequestBody), "invalid request, validation error: " + err};
      return;
    }
    if (!cwd.empty() && cwd[0] == '~' && (cwd.size() == 1 || cwd[1] == '/')) {
      const char* home = env_lookup(ctx.base_env, "HOME");
      cwd = std::string(home ? home : "/") + cwd.substr(1);
    }
    struct stat st;
    if (stat(cwd.c_str(), &st) != 0) {
      w->error = ApiError{400, std::string(codes::kInvalidRequestBody),
                          "invalid request, validation error: working directory does not exist: " + cwd};
      return;
    }
    if (!S_ISDIR(st.st_mode)) {
      w->error = ApiError{400, std::string(codes::kInvalidRequestBody),
                          "invalid request, validation error: working directory is not a directory: " + cwd};
      return;
    }
    opts.cwd = cwd;
  }
  opts.program = ctx.shell;
  opts.argv = {ctx.shell, "-c", req.command};
  opts.env = std::move(env);
  opts.use_pty = req.tty;
  opts.rows = req.rows;
  opts.cols = req.cols;
}

// Needs the threadpool: a cwd to check, a user to look up, or an env file to read.
bool needs_pool(const Context& ctx, const protocol::CommandRequest& req) {
  const char* envs_file = env_lookup(ctx.base_env, "EXECD_ENVS");
  return req.uid || !req.cwd.empty() || (envs_file && *envs_file);
}

void start_command(CommandRegistry& reg, http::Exchange& ex, PrepareWork& w) {
  if (w.error) return ex.respond_error(w.error->status, w.error->code, w.error->message);
  Context& ctx = reg.ctx();
  if (ctx.shutting_down) return ex.respond_error(503, codes::kRuntimeError, "execd is shutting down");
  CommandRecord* rec = reg.create(w.req.command, w.req.background);
  pty::CommandLimits limits;
  limits.timeout_ms = w.req.timeout_ms;
  limits.kill_grace_ms = ctx.config.kill_grace_ms;
  std::string error;
  auto stream = std::make_unique<ExecutionStream>(ex, w.framing);
  ExecutionStream& s = *stream;
  ex.attach(std::move(stream));
  s.start(*rec, rec->id);
  rec->cmd = pty::Command::start(ctx.loop, *ctx.reaper, w.opts, limits, rec, error);
  if (!rec->cmd) {
    // Contract 3.4: a start failure is still a 200 stream with init, then an error.
    spdlog::warn("command {} failed to start: {}", rec->id, error);
    rec->start_error = error;
    rec->finished_ns = unix_ns();
    s.finish(rec->result());
    reg.finished(rec);
    return;
  }
  spdlog::info("command {} started: pid {}{}", rec->id, rec->cmd->pid(), w.req.background ? " (background)" : "");
  if (w.req.background) s.finish_background();
}

void after_prepare(uv_work_t* work, int) {
  std::unique_ptr<PrepareWork> w(static_cast<PrepareWork*>(work->data));
  if (http::Exchange* ex = w->exchange()) start_command(*w->reg, *ex, *w);
  // else: the client left before anything started
}

void handle_run(CommandRegistry& reg, http::Exchange& ex) {
  auto decoded = protocol::decode_command_request(ex.request().body);
  if (auto* err = std::get_if<protocol::DecodeError>(&decoded))
    return ex.respond_error(400, codes::kInvalidRequestBody, err->message);
  auto w = std::make_unique<PrepareWork>();
  w->work.data = w.get();
  w->reg = &reg;
  w->req = std::move(std::get<protocol::CommandRequest>(decoded));
  w->framing = framing_for(reg.ctx(), ex);
  if (!needs_pool(reg.ctx(), w->req)) {
    // Nothing that blocks: prepare on the loop and save two thread hops.
    prepare(&w->work);
    return start_command(reg, ex, *w);
  }
  int rc = uv_queue_work(reg.ctx().loop, &w->work, prepare, after_prepare);
  if (rc != 0) return ex.respond_error(500, codes::kRuntimeError, std::string("cannot queue work: ") + uv_strerror(rc));
  await(ex, *w.release());
}

void respond_unknown(http::Exchange& ex, const std::string& id) {
  ex.respond_error(404, codes::kInvalidRequestBody, "command not found: " + id);
}

void handle_interrupt(CommandRegistry& reg, SessionRegistry& sessions, http::Exchange& ex) {
  const protocol::QueryParams& q = ex.query;
  const std::string* id = protocol::query_value(q, "id");
  if (!id || id->empty()) {
    ex.respond_error(400, codes::kMissingQuery, "missing query parameter 'id'");
    return;
  }
  CommandRecord* rec = reg.find(*id);
  if (!rec) {
    // Contract 4.5: the id may name a bash session; its run is stopped.
    switch (sessions.interrupt_run(*id)) {
      case InterruptResult::interrupted:
        ex.respond_empty(200);
        return;
      case InterruptResult::not_running:
        ex.respond_error(500, codes::kRuntimeError,
                           "error interrupting command. session " + *id + " is not running a command");
        return;
      case InterruptResult::not_found:
        respond_unknown(ex, *id);
        return;
    }
  }
  if (!rec->cmd || !rec->cmd->running()) {
    ex.respond_error(500, codes::kRuntimeError,
                       "error interrupting command. command " + *id + " is not running");
    return;
  }
  // Returns at once; the command's own stream reports how it ended.
  rec->cmd->interrupt();
  ex.respond_empty(200);
}

void handle_status(CommandRegistry& reg, http::Exchange& ex, const std::string& id) {
  CommandRecord* rec = reg.find(id);
  if (!rec) {
    respond_unknown(ex, id);
    return;
  }
  ex.respond_json(200, rec->status_json());
}

struct LogRead : Awaitable {};

void handle_logs(CommandRegistry& reg, http::Exchange& ex, const std::string& id) {
  const protocol::QueryParams& q = ex.query;
  constexpr size_t kMaxLogRead = 4 << 20;
  CommandRecord* rec = reg.find(id);
  if (!rec) {
    respond_unknown(ex, id);
    return;
  }
  // As Go: anything that is not a base-10 int64 (overflow included) reads
  // from 0; a negative cursor is a failed seek.
  const std::string* raw = protocol::query_value(q, "cursor");
  std::optional<uint64_t> offset = pty::logs_cursor_offset(raw ? std::optional<std::string_view>(*raw) : std::nullopt);
  if (!offset)
    return ex.respond_error(400, codes::kInvalidRequestBody, "error seek file: negative cursor " + *raw);
  uint64_t cursor = *offset;
  bool truncated = rec->log->truncated();
  auto* waiting = new LogRead;
  await(ex, *waiting);
  rec->log->read(cursor, kMaxLogRead, [waiting, cursor, truncated](int err, std::string data) {
    std::unique_ptr<LogRead> done(waiting);
    http::Exchange* ex = done->exchange();
    if (!ex) return;
    if (err) return ex->respond_error(500, codes::kRuntimeError, std::string("error reading output: ") + uv_strerror(err));
    uint64_t next = cursor + data.size();
    std::vector<std::string> headers = {"EXECD-COMMANDS-TAIL-CURSOR: " + std::to_string(next)};
    if (truncated) headers.emplace_back("EXECD-COMMANDS-LOG-TRUNCATED: true");
    ex->respond(200, "text/plain; charset=utf-8", data, headers);
  });
}

}  // namespace

void interrupt_command(CommandRegistry& commands, SessionRegistry& sessions, http::Exchange& ex) {
  handle_interrupt(commands, sessions, ex);
}

void add_command_routes(RouteTable& routes, CommandRegistry& commands, SessionRegistry& sessions) {
  routes.add("POST", "/command", [&commands](http::Exchange& ex) { handle_run(commands, ex); });
  routes.add("DELETE", "/command",
             [&commands, &sessions](http::Exchange& ex) { handle_interrupt(commands, sessions, ex); });
  routes.add("GET", "/command/status/:id",
             [&commands](http::Exchange& ex) { handle_status(commands, ex, ex.params.get("id")); });
  routes.add("GET", "/command/:id/logs",
             [&commands](http::Exchange& ex) { handle_logs(commands, ex, ex.params.get("id")); });
}

}  // namespace execd::api
