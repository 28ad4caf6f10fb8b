// execd/api/operations: see header. Every answer here is Cache-Control:
// no-store (identities and handles are a caller's private state).
#include "execd/api/operations.h"

#include <spdlog/spdlog.h>

#include <ctime>
#include <memory>

#include "execd/api/api.h"
#include "execd/files/file_jobs.h"
#include "execd/sessions/pty.h"
#include "execd/exec/registry.h"
#include "fs/pool_job.h"
#include "protocol/errors.h"
#include "protocol/operations.h"
#include "protocol/query_values.h"

namespace execd::api {

namespace codes = protocol::codes;
namespace op_codes = protocol::operation_codes;
using exec::Operation;
using exec::OperationKind;
using exec::OperationStore;
using protocol::ApiError;

namespace {

const std::vector<std::string> kNoStore = {"Cache-Control: no-store"};

int64_t now_seconds() { return static_cast<int64_t>(::time(nullptr)); }

void respond_error(http::Exchange& ex, int status, std::string_view code, std::string_view message) {
  ex.respond(status, "application/json; charset=utf-8", protocol::error_body(code, message), kNoStore);
}
void respond_error(http::Exchange& ex, const ApiError& e) { respond_error(ex, e.status, e.code, e.message); }

std::string document(const Operation& op) {
  return protocol::execution_operation_json(op.id, exec::operation_kind_name(op.kind),
                                            exec::operation_state_name(op.state), op.expires_at);
}
// 202 while creating, 200 once created or failed.
void respond_document(http::Exchange& ex, const Operation& op, const std::string& doc) {
  ex.respond(op.state == exec::OperationState::creating ? 202 : 200, "application/json; charset=utf-8", doc, kNoStore);
}

const std::string* operation_header(const http::Exchange& ex) { return ex.header("x-execd-operation-id"); }

// A launch's start, told once whether the run started: the record's state.
// A launch that is refused (admission, preparation: a bad cwd or user)
// drops its start without starting, which is the failure.
class ReportingStart final : public exec::RunStart {
 public:
  ReportingStart(std::unique_ptr<exec::RunStart> inner, std::function<void(bool)> outcome)
      : inner_(std::move(inner)), outcome_(std::move(outcome)) {}
  ~ReportingStart() override { tell(false); }
  std::optional<ApiError> admission() override { return inner_->admission(); }
  bool prepare_blocks() const override { return inner_->prepare_blocks(); }
  std::optional<ApiError> prepare() override { return inner_->prepare(); }
  watch::MountRef track_mount() const override { return inner_->track_mount(); }
  std::optional<ApiError> recheck() override { return inner_->recheck(); }
  void fill_spec(exec::ExecutionSpec& spec) override { inner_->fill_spec(spec); }
  std::unique_ptr<exec::StreamFormat> stream_format(http::Exchange& client) override {
    return inner_->stream_format(client);
  }
  std::vector<std::string> stream_headers(const exec::Execution& e) override { return inner_->stream_headers(e); }
  std::unique_ptr<exec::Runner> start(exec::Execution& e, std::string& error) override {
    auto runner = inner_->start(e, error);
    if (!runner) tell(false);
    return runner;
  }
  void started(exec::Execution& e, http::Exchange* client) override {
    inner_->started(e, client);
    tell(true);
  }
  void refuse(http::Exchange& client, const ApiError& why) override { inner_->refuse(client, why); }
  bool start_failure_refuses() const override { return inner_->start_failure_refuses(); }

 private:
  void tell(bool ok) {
    if (!outcome_) return;
    auto f = std::move(outcome_);
    outcome_ = nullptr;
    f(ok);
  }
  std::unique_ptr<exec::RunStart> inner_;
  std::function<void(bool)> outcome_;
};

// The claim's refusals, as upstream words them.
void respond_claim_refusal(http::Exchange& ex, OperationStore::Outcome o) {
  switch (o) {
    case OperationStore::Outcome::conflict:
      return respond_error(ex, 409, op_codes::kConflict, "operation identity was used with a different request");
    case OperationStore::Outcome::expired:
      return respond_error(ex, 410, op_codes::kExpired,
                           "recovery window expired; previous execution outcome is unknown, creation refused");
    case OperationStore::Outcome::full:
      return respond_error(ex, 503, op_codes::kCapacity, "operation recovery capacity reached; creation refused");
    default:
      return respond_error(ex, 500, codes::kRuntimeError, "operation creation failed");
  }
}

// The identity's end, or the refusal answered.
std::optional<int64_t> checked_expiry(OperationService& svc, http::Exchange& ex, std::string_view identity,
                                      int64_t now) {
  auto checked = protocol::check_operation_identity(identity, svc.store.instance_id(), now);
  if (auto* err = std::get_if<ApiError>(&checked)) {
    respond_error(ex, *err);
    return std::nullopt;
  }
  return std::get<int64_t>(checked) + protocol::kOperationRetentionSeconds;
}

void handle_instance(OperationService& svc, http::Exchange& ex) {
  ex.respond(200, "application/json; charset=utf-8",
             protocol::execution_instance_json(svc.store.instance_id(), now_seconds(), svc.store.capacity()), kNoStore);
}

void handle_lookup(OperationService& svc, http::Exchange& ex) {
  const std::string* kind_s = protocol::query_value(ex.query, "kind");
  if (!kind_s || (*kind_s != "command" && *kind_s != "pty"))
    return respond_error(ex, 400, op_codes::kInvalidKind, "kind must be command or pty");
  OperationKind kind = *kind_s == "command" ? OperationKind::command : OperationKind::pty;
  const std::string* header = operation_header(ex);
  std::string identity = header ? *header : std::string();
  int64_t now = now_seconds();
  auto expiry = checked_expiry(svc, ex, identity, now);
  if (!expiry) return;
  if (Operation* op = svc.store.find(svc.access.execd_principal(ex), kind, identity, now))
    return respond_document(ex, *op, document(*op));
  if (now >= *expiry)
    return respond_error(ex, 410, op_codes::kExpired, "recovery window expired; previous execution outcome is unknown");
  respond_error(ex, 404, op_codes::kNotFound, "operation not found in this authenticated execd instance");
}

void handle_command(OperationService& svc, http::Exchange& ex) {
  auto decoded = protocol::decode_keyed_command(ex.request().body);
  if (auto* err = std::get_if<protocol::DecodeError>(&decoded)) {
    if (err->message == protocol::kInvalidCommandRequest)
      return respond_error(ex, 400, codes::kInvalidRequestBody, err->message);
    return respond_error(ex, 400, codes::kInvalidRequestBody,
                         "error parsing request, MAYBE invalid body format. " + err->message);
  }
  protocol::KeyedCommand keyed = std::move(std::get<protocol::KeyedCommand>(decoded));
  protocol::CommandRequest& req = keyed.request;
  // Limits without a cgroup would be claimed but not enforced (as POST /command refuses them).
  if ((req.limit_memory_bytes || req.limit_pids || req.limit_cpu_shares) &&
      !svc.commands.runtime.containment.has_cgroups())
    return respond_error(ex, 400, codes::kInvalidRequestBody, protocol::kInvalidCommandRequest);
  int64_t now = now_seconds();
  auto expiry = checked_expiry(svc, ex, keyed.operation_id, now);
  if (!expiry) return;
  if (!svc.commands.executions.accepting())
    return respond_error(ex, 503, codes::kRuntimeError, "execd is shutting down");
  auto claim = svc.store.claim(svc.access.execd_principal(ex), OperationKind::command, keyed.operation_id, *expiry,
                               protocol::request_fingerprint(req), now);
  if (claim.outcome == OperationStore::Outcome::existing) return respond_document(ex, *claim.op, document(*claim.op));
  if (claim.outcome != OperationStore::Outcome::owner) return respond_claim_refusal(ex, claim.outcome);
  // The owner: the snapshot right after the claim is the answer; the
  // command starts under the record's id on POST /command's path.
  const Operation snapshot = *claim.op;
  std::string doc = document(snapshot);
  req.id = snapshot.id;
  OperationStore& store = svc.store;
  std::string id = snapshot.id;
  auto start = std::make_unique<ReportingStart>(keyed_command_start(svc.commands, req),
                                                [&store, id](bool ok) { store.finish(id, ok); });
  if (svc.commands.executions.contains(id)) {
    store.finish(id, false);  // a command of that id already (not one execd would pick again)
  } else if (auto refused = svc.commands.launches.launch(nullptr, keyed_command_spec(req), std::move(start))) {
    spdlog::info("operation command {} refused: {}", id, refused->message);
  }
  respond_document(ex, snapshot, doc);
}

void handle_pty(OperationService& svc, http::Exchange& ex) {
  auto decoded = protocol::decode_keyed_pty(ex.request().body);
  if (auto* err = std::get_if<protocol::DecodeError>(&decoded))
    return respond_error(ex, 400, codes::kInvalidRequestBody, "error parsing request: " + err->message);
  protocol::KeyedPty keyed = std::move(std::get<protocol::KeyedPty>(decoded));
  int64_t now = now_seconds();
  auto expiry = checked_expiry(svc, ex, keyed.operation_id, now);
  if (!expiry) return;
  auto claim = svc.store.claim(svc.access.execd_principal(ex), OperationKind::pty, keyed.operation_id, *expiry,
                               protocol::pty_fingerprint(keyed.request), now);
  if (claim.outcome == OperationStore::Outcome::existing) return respond_document(ex, *claim.op, document(*claim.op));
  if (claim.outcome != OperationStore::Outcome::owner) return respond_claim_refusal(ex, claim.outcome);
  const Operation snapshot = *claim.op;
  std::string doc = document(snapshot);
  if (svc.ptys.count() >= svc.ctx.config.max_ptys) {
    spdlog::info("operation pty {} failed: --max-ptys ({}) sessions held", snapshot.id, svc.ctx.config.max_ptys);
    svc.store.finish(snapshot.id, false);
  } else {
    // The working directory is made on the pool (mkdir -p may block), as POST /pty's.
    struct Job {
      OperationService* svc;
      std::string id, cwd, command;
      std::vector<std::string> env;
      WorkingDir dir;
    };
    auto job = std::make_unique<Job>(Job{&svc, snapshot.id, keyed.request.cwd, keyed.request.command,
                                         svc.ctx.base_env, {}});
    fs::queue_job<Job>(
        svc.ctx.loop, std::move(job), [](Job& j) { j.dir = make_working_dir(j.env, j.cwd); },
        [](Job& j, int) {
          bool ok = j.dir.error.empty() && create_pty_session(j.svc->ptys, j.id, j.dir.path, j.command);
          if (!ok) spdlog::info("operation pty {} failed: {}", j.id, j.dir.error.empty() ? "id taken" : j.dir.error);
          j.svc->store.finish(j.id, ok);
        });
  }
  respond_document(ex, snapshot, doc);
}

bool is_operation_path(std::string_view path) {
  return path == "/execution/instance" || path == "/execution/operation" || path == "/command/operations" ||
         path == "/pty/operations";
}

}  // namespace

bool respond_operations_unauthorized(http::Exchange& ex) {
  if (!is_operation_path(ex.request().path)) return false;
  respond_error(ex, 401, codes::kUnauthorized, "Invalid or missing execd access token");
  return true;
}

void add_operation_routes(RouteTable& routes, OperationService& svc) {
  // An expired record goes with its run only once that run is over; a
  // PTY session (dormant or exited) is deleted with it.
  svc.store.set_releasable([&svc](const Operation& op) {
    if (op.kind == OperationKind::command) {
      exec::Execution* e = svc.commands.executions.find(op.id);
      return !e || e->done();
    }
    if (pty_session_running(svc.ptys, op.id)) return false;
    if (sessions::PtyEntry* e = svc.ptys.find(op.id)) svc.ptys.remove(e);
    return true;
  });
  routes.add("GET", "/execution/instance", [&svc](http::Exchange& ex) { handle_instance(svc, ex); });
  routes.add("GET", "/execution/operation", [&svc](http::Exchange& ex) { handle_lookup(svc, ex); });
  routes.add("POST", "/command/operations", [&svc](http::Exchange& ex) { handle_command(svc, ex); },
             kStartsProcesses);
  routes.add("POST", "/pty/operations", [&svc](http::Exchange& ex) { handle_pty(svc, ex); }, kStartsProcesses);
}

}  // namespace execd::api
