// execd/api/commands: the /command API, on top of the execution model
// (execd/exec) and the command runner (execd/runners/command):
//   POST   /command                      start (or attach to a start with the same id)
//   GET    /command?running=&cursor=     the inventory, paged
//   DELETE /command?id=                  interrupt
//   GET    /command/status/{id}          status
//   GET    /command/{id}/logs?cursor=N   retained output, raw
//   GET    /command/{id}/stream          resume by offset (exact framing)
//   POST   /command/{id}/stdin           stdin (exec/stdin)
//   GET    /session/{id}/stream          the session's latest run
// Any execution answers the id routes: commands, session runs, code runs.
#include "execd/api/commands.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <vector>

#include "execd/api/pause.h"
#include "execd/http/awaiter.h"
#include "execd/sessions/bash.h"
#include "execd/exec/formats.h"
#include "execd/exec/launch.h"
#include "execd/exec/logs.h"
#include "execd/exec/reader.h"
#include "execd/exec/stdin.h"
#include "execd/limits.h"
#include "execd/runners/command_launch.h"
#include "protocol/errors.h"
#include "protocol/execution_record.h"
#include "protocol/list_cursor.h"
#include "protocol/query_values.h"
#include "protocol/requests.h"
#include "protocol/resume.h"

namespace execd::api {

using protocol::ApiError;
namespace codes = protocol::codes;
using exec::Execution;
using exec::ExecutionReader;

namespace {


void handle_run(CommandService& svc, http::Exchange& ex) {
  auto decoded = protocol::decode_command_request(ex.request().body);
  if (auto* err = std::get_if<protocol::DecodeError>(&decoded))
    return ex.respond_error(400, codes::kInvalidRequestBody, err->message);
  protocol::CommandRequest req = std::move(std::get<protocol::CommandRequest>(decoded));
  // Limits are a cgroup's to enforce: without one, refused rather than
  // run unbounded under a limit the result would claim.
  if ((req.limit_memory_bytes || req.limit_pids || req.limit_cpu_shares) && !svc.runtime.containment.has_cgroups())
    return ex.respond_error(400, codes::kInvalidRequestBody,
                            std::string("limits need cgroups (containment is ") +
                                pty::containment_mode_name(svc.runtime.containment.mode()) +
                                "): memory_bytes, pids and cpu_shares cannot be enforced without them");
  protocol::Framing framing = framing_for(svc.ctx, ex);
  if (!svc.executions.accepting()) return ex.respond_error(503, codes::kRuntimeError, "execd is shutting down");
  std::string fingerprint = protocol::request_fingerprint(req);
  if (!req.id.empty()) {
    if (Execution* existing = svc.executions.find(req.id)) {
      // A retried start: the same request attaches to the run, a different
      // one is refused.
      if (existing->spec().fingerprint != fingerprint)
        return ex.respond_error(409, "COMMAND_ID_CONFLICT",
                                "command id " + req.id + " is already used by a different request");
      if (!admit(ex, svc.executions.readers(), svc.ctx.config.max_readers, "resume readers", "max-readers")) return;
      auto reader = std::make_unique<ExecutionReader>(ex, *existing, ExecutionReader::Role::attach, framing);
      ExecutionReader& r = *reader;
      ex.attach(std::move(reader));
      if (!existing->starting()) r.begin();
      return;
    }
  }
  // A command the client named goes on if the client leaves: its retry attaches.
  bool named = !req.id.empty();
  exec::ExecutionSpec spec = runners::command_spec(req, std::move(fingerprint));
  svc.launches.launch(&ex, std::move(spec), runners::command_start(svc.ctx, svc.runtime, std::move(req), framing), named);
}

}  // namespace

bool start_trusted_command(CommandService& svc, protocol::CommandRequest req, std::string& error) {
  return runners::start_trusted_command(svc.ctx, svc.runtime, svc.launches, std::move(req), error);
}

exec::ExecutionSpec keyed_command_spec(const protocol::CommandRequest& req) {
  return runners::command_spec(req, protocol::request_fingerprint(req));
}

std::unique_ptr<exec::RunStart> keyed_command_start(CommandService& svc, protocol::CommandRequest req) {
  return runners::command_start(svc.ctx, svc.runtime, std::move(req), protocol::Framing::exact);
}

namespace {

void respond_unknown(http::Exchange& ex, const std::string& id) {
  ex.respond_error(404, codes::kInvalidRequestBody, "command not found: " + id);
}

void handle_interrupt(CommandService& svc, sessions::SessionRegistry& sessions, http::Exchange& ex) {
  const std::string* id = protocol::query_value(ex.query, "id");
  if (!id || id->empty()) return ex.respond_error(400, codes::kMissingQuery, "missing query parameter 'id'");
  Execution* e = svc.executions.find(*id);
  if (!e) {
    // Contract 4.5: the id may name a bash session; its run is stopped.
    switch (sessions.interrupt_run(*id)) {
      case sessions::InterruptResult::interrupted:
        return ex.respond_empty(200);
      case sessions::InterruptResult::not_running:
        return ex.respond_error(500, codes::kRuntimeError,
                                "error interrupting command. session " + *id + " is not running a command");
      case sessions::InterruptResult::not_found:
        return respond_unknown(ex, *id);
    }
  }
  if (!e->interrupt())
    return ex.respond_error(500, codes::kRuntimeError, "error interrupting command. command " + *id + " is not running");
  ex.respond_empty(200);
}

// GET /command?running=true|false&limit=N&cursor=C&content=true: what
// execd knows (running and retained executions of every kind), in start
// order, without commands or code unless asked, never cached.
void handle_list(CommandService& svc, http::Exchange& ex) {
  constexpr size_t kDefaultLimit = 100, kMaxLimit = 1000;
  const std::string* running = protocol::query_value(ex.query, "running");
  if (running && *running != "true" && *running != "false")
    return ex.respond_error(400, codes::kInvalidRequestBody, "running must be true or false");
  size_t limit = kDefaultLimit;
  if (const std::string* l = protocol::query_value(ex.query, "limit")) {
    char* end = nullptr;
    long n = strtol(l->c_str(), &end, 10);
    if (l->empty() || *end || n < 1 || n > static_cast<long>(kMaxLimit))
      return ex.respond_error(400, codes::kInvalidRequestBody, "limit must be between 1 and 1000");
    limit = static_cast<size_t>(n);
  }
  const std::string* content = protocol::query_value(ex.query, "content");
  const bool with_content = content && *content == "true";
  const std::string filter = "running=" + (running ? *running : std::string("all"));
  std::optional<protocol::ListPosition> after;
  if (const std::string* c = protocol::query_value(ex.query, "cursor"); c && !c->empty()) {
    after = protocol::decode_list_cursor(*c, filter);
    if (!after)
      return ex.respond_error(400, "INVALID_CURSOR", "cursor is not one this listing gave for running=" +
                                                         (running ? *running : std::string("(any)")));
  }
  using Brief = exec::Registry::Brief;
  bool more = false;
  std::optional<bool> only_running;
  if (running) only_running = *running == "true";
  std::vector<Brief> page = svc.executions.page(only_running, after, limit, more);
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const Brief& e : page)
    if (auto summary = svc.executions.summary_json(std::string(e.id), with_content)) list.push_back(std::move(*summary));
  nlohmann::ordered_json j;
  j["commands"] = std::move(list);
  j["next_cursor"] = more ? nlohmann::ordered_json(protocol::encode_list_cursor(
                                filter, {page.back().started_ns, std::string(page.back().id)}))
                          : nlohmann::ordered_json();
  ex.respond(200, "application/json; charset=utf-8",
             j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace), {"Cache-Control: no-store"});
}

void handle_status(CommandService& svc, http::Exchange& ex, const std::string& id) {
  Execution* e = svc.executions.find(id);
  if (!e) return respond_unknown(ex, id);
  ex.respond_json(200, e->status_json());
}

// GET /command/{id}/logs?cursor=N: the retained stdout and stderr from
// combined offset N (structured events are left out), at most 4 MiB.
struct LogRead : http::Awaitable {};

void handle_logs(CommandService& svc, http::Exchange& ex, const std::string& id) {
  constexpr size_t kMaxLogRead = 4 << 20;
  Execution* e = svc.executions.find(id);
  if (!e) return respond_unknown(ex, id);
  respond_logs(ex, *e, kMaxLogRead, "EXECD-COMMANDS-TAIL-CURSOR", "EXECD-COMMANDS-LOG-TRUNCATED");
}

}  // namespace

void respond_logs(http::Exchange& ex, exec::Execution& execution, size_t max_bytes, std::string_view cursor_header,
                  std::string_view truncated_header) {
  Execution* e = &execution;
  // As Go: anything that is not a base-10 int64 (overflow included) reads
  // from 0; a negative cursor is a failed seek.
  const std::string* raw = protocol::query_value(ex.query, "cursor");
  std::optional<uint64_t> offset =
      protocol::logs_cursor_offset(raw ? std::optional<std::string_view>(*raw) : std::nullopt);
  if (!offset) return ex.respond_error(400, codes::kInvalidRequestBody, "error seek file: negative cursor " + *raw);
  exec::LogsStart start = exec::logs_start(*e, *offset);
  auto* waiting = new LogRead;
  http::await(ex, *waiting);
  exec::read_logs(*e, start.cursor, max_bytes,
                  [waiting, truncated = start.truncated, cursor_header = std::string(cursor_header),
                   truncated_header = std::string(truncated_header)](int err, std::string text, uint64_t next) {
                    std::unique_ptr<LogRead> done(waiting);
                    http::Exchange* ex = done->exchange();
                    if (!ex) return;
                    if (err)
                      return ex->respond_error(500, codes::kRuntimeError,
                                               std::string("error reading output: ") + uv_strerror(err));
                    std::vector<std::string> headers = {cursor_header + ": " + std::to_string(next)};
                    if (truncated) headers.emplace_back(truncated_header + ": true");
                    ex->respond(200, "text/plain; charset=utf-8", text, headers);
                  });
}

namespace {

// GET /command/{id}/stream?stdout=N&stderr=M: always exact framing (offsets
// are byte offsets of the streams).
void handle_stream(CommandService& svc, http::Exchange& ex, const std::string& id) {
  Execution* e = svc.executions.find(id);
  if (!e) return respond_unknown(ex, id);
  uint64_t from[2] = {0, 0};
  const char* names[2] = {"stdout", "stderr"};
  for (int s = 0; s < 2; ++s) {
    const std::string* raw = protocol::query_value(ex.query, names[s]);
    if (!raw) continue;
    auto v = protocol::parse_offset(*raw);
    if (!v) return ex.respond_error(400, codes::kInvalidRequestBody, std::string(names[s]) + " must be a byte offset");
    if (e->done() && *v > e->produced(s))
      return ex.respond_error(400, codes::kInvalidRequestBody,
                              std::string(names[s]) + " offset " + std::to_string(*v) + " is past the end (" +
                                  std::to_string(e->produced(s)) + " bytes)");
    from[s] = *v;
  }
  if (!admit(ex, svc.executions.readers(), svc.ctx.config.max_readers, "resume readers", "max-readers")) return;
  auto reader = std::make_unique<ExecutionReader>(ex, *e, ExecutionReader::Role::resume, protocol::Framing::exact,
                                                  from[0], from[1]);
  ExecutionReader& r = *reader;
  ex.attach(std::move(reader));
  if (!e->starting()) r.begin();
}

// POST /command/{id}/stdin[?offset=N][&eof=true], at head time: decide
// whether the body is wanted, and attach the Source that takes it.
void stdin_head(CommandService& svc, http::Exchange& ex) {
  const std::string id = ex.params.get("id");
  auto refuse = [&ex](int status, std::string code, std::string message) {
    ex.on_complete = [status, code, message](http::Exchange& e) { e.respond_error(status, code, message); };
  };
  Execution* e = svc.executions.find(id);
  if (!e) return refuse(404, std::string(codes::kInvalidRequestBody), "command not found: " + id);
  if (!e->stdin_open())
    return refuse(409, "STDIN_NOT_OPEN", "command " + id + " was not started with \"stdin\": true");
  std::optional<uint64_t> offset;
  if (const std::string* raw = protocol::query_value(ex.query, "offset")) {
    offset = protocol::parse_offset(*raw);
    if (!offset) return refuse(400, std::string(codes::kInvalidRequestBody), "offset must be a byte count");
  }
  const std::string* eof_raw = protocol::query_value(ex.query, "eof");
  bool eof = eof_raw && (*eof_raw == "true" || *eof_raw == "1");
  auto plan = protocol::plan_stdin_write(e->stdin_accepted(), offset);
  if (plan.gap)
    return refuse(409, "STDIN_OFFSET_GAP",
                  "offset " + std::to_string(*offset) + " is past the " + std::to_string(e->stdin_accepted()) +
                      " bytes accepted so far");
  if (e->stdin_busy()) return refuse(409, "STDIN_BUSY", "another stdin write to " + id + " is in progress");
  if (!e->stdin_writable()) {
    // Closed already (eof, the command ended or closed it): a retry that
    // brings nothing new still learns the offset.
    const std::string* len = ex.header("content-length");
    bool empty_body = !len || *len == "0";
    if ((empty_body || plan.skip > 0) && e->stdin_eof()) {
      uint64_t accepted = e->stdin_accepted();
      ex.on_complete = [accepted](http::Exchange& x) { x.respond_json(200, exec::stdin_offset_json(accepted)); };
      return;
    }
    return refuse(409, "STDIN_CLOSED", "the stdin of command " + id + " is closed");
  }
  auto body = std::make_unique<exec::StdinBody>(ex, *e, plan.skip, eof, svc.ctx.config.stdin_timeout_ms);
  exec::StdinBody& b = *body;
  ex.attach(std::move(body));
  ex.on_complete = [&b](http::Exchange&) { b.complete(); };
}

}  // namespace

protocol::Framing framing_for(const Context& ctx, const http::Exchange& ex) {
  const std::string* accept = ex.header("accept");
  bool exact = ctx.config.exact_framing || (accept && accept->find("application/x-ndjson") != std::string::npos);
  return exact ? protocol::Framing::exact : protocol::Framing::compat;
}

void interrupt_command(CommandService& svc, sessions::SessionRegistry& sessions, http::Exchange& ex) {
  handle_interrupt(svc, sessions, ex);
}

void add_command_routes(RouteTable& routes, CommandService& svc, sessions::SessionRegistry& sessions) {
  routes.add("POST", "/command", [&svc](http::Exchange& ex) { handle_run(svc, ex); }, kStartsProcesses);
  routes.add("GET", "/command", [&svc](http::Exchange& ex) { handle_list(svc, ex); });
  routes.add("DELETE", "/command", [&svc, &sessions](http::Exchange& ex) { handle_interrupt(svc, sessions, ex); });
  routes.add("GET", "/command/status/:id",
             [&svc](http::Exchange& ex) { handle_status(svc, ex, ex.params.get("id")); });
  routes.add("GET", "/command/:id/logs", [&svc](http::Exchange& ex) { handle_logs(svc, ex, ex.params.get("id")); });
  routes.add("GET", "/command/:id/stream",
             [&svc](http::Exchange& ex) { handle_stream(svc, ex, ex.params.get("id")); });
  // The latest run of a bash session (its execution id is "<session>.<n>",
  // also in the run response's EXECD-RUN-ID header).
  routes.add("GET", "/session/:id/stream", [&svc, &sessions](http::Exchange& ex) {
    std::string run = sessions.latest_run(ex.params.get("id"));
    if (run.empty())
      return ex.respond_error(404, codes::kContextNotFound, "session " + ex.params.get("id") + " has no run to stream");
    handle_stream(svc, ex, run);
  });
  routes.add_streaming(
      "POST", "/command/:id/stdin", [&svc](http::Exchange& ex) { stdin_head(svc, ex); },
      [](http::Exchange&) {}, kStartsProcesses);
}

}  // namespace execd::api
