// execd/api/pause: see header.
#include "execd/api/pause.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "execd/clock.h"
#include "execd/http/awaiter.h"
#include "protocol/errors.h"
#include "protocol/query_values.h"

namespace execd::api {

namespace codes = protocol::codes;
using ojson = nlohmann::ordered_json;

// What execd keeps in its state directory against its budget
// (exec/state_budget): /activity's "state_dir" and /metrics' (execd's one
// addition to the Go daemon's body).
nlohmann::ordered_json state_dir_json(exec::StateBudget& budget) {
  budget.refresh(true);
  return {{"used_bytes", budget.used()},
          {"budget_bytes", budget.limit()},
          {"output_bytes", budget.output_bytes()},
          {"output_budget_bytes", budget.output_limit()},
          {"journal_bytes", budget.journal_bytes()},
          {"other_bytes", budget.other_bytes()},
          {"evicted_bytes", budget.evicted_bytes()},
          {"trimmed_bytes", budget.trimmed_bytes()},
          {"filesystem_bytes", budget.fs_bytes()},
          {"filesystem_free_bytes", budget.fs_free_bytes()}};
}

namespace {

ojson time_or_null(int64_t ms) { return ms ? ojson(rfc3339_nano(ms * 1000000)) : ojson(); }

std::string plural(size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

void handle_activity(PauseService& s, http::Exchange& ex) {
  int64_t now = unix_ms();
  size_t commands = s.executions.running_of(exec::Kind::command);
  size_t session_runs = s.executions.running_of(exec::Kind::session_run);
  size_t code_runs = s.executions.running_of(exec::Kind::code_run);
  size_t attached = s.ptys.live_clients();
  size_t leftover = s.containment.lingering_with_members();
  size_t proxied = s.proxy.open();
  size_t file_work = s.file_gate.running() + s.file_gate.waiting();
  int64_t last = std::max({s.activity.last_output_ms(), s.activity.last_input_ms(), s.activity.last_request_ms()});
  int64_t quiet_ms = last ? now - last : -1;

  // Busy: something runs, a terminal is attached, a service is being
  // proxied, files move, or anything happened within --idle-after.
  std::vector<std::string> reasons;
  if (commands) reasons.push_back(plural(commands, "command running", "commands running"));
  if (session_runs) reasons.push_back(plural(session_runs, "session run running", "session runs running"));
  if (code_runs) reasons.push_back(plural(code_runs, "code run running", "code runs running"));
  if (attached) reasons.push_back(plural(attached, "terminal attached", "terminals attached"));
  if (leftover) reasons.push_back(plural(leftover, "finished command left processes", "finished commands left processes"));
  if (proxied) reasons.push_back(plural(proxied, "proxied request or tunnel open", "proxied requests or tunnels open"));
  if (file_work) reasons.push_back(plural(file_work, "file operation in progress", "file operations in progress"));
  if (last && quiet_ms < s.ctx.config.idle_after_ms)
    reasons.push_back("activity " + std::to_string(quiet_ms) + " ms ago (--idle-after " +
                      std::to_string(s.ctx.config.idle_after_ms) + " ms)");

  ojson j;
  j["verdict"] = reasons.empty() ? "idle" : "busy";
  j["reasons"] = reasons;
  j["frozen"] = s.containment.frozen();
  j["idle_for_ms"] = reasons.empty() ? (last ? quiet_ms : -1) : 0;
  j["idle_after_ms"] = s.ctx.config.idle_after_ms;
  j["last_output_at"] = time_or_null(s.activity.last_output_ms());
  j["last_input_at"] = time_or_null(s.activity.last_input_ms());
  j["last_request_at"] = time_or_null(s.activity.last_request_ms());
  j["running"] = {{"commands", commands}, {"session_runs", session_runs}, {"code_runs", code_runs}};
  j["sessions"] = {{"open", s.sessions.count()}, {"busy", s.sessions.busy()}};
  j["ptys"] = {{"open", s.ptys.count()}, {"attached", attached}};
  j["kernels"] = {{"alive", s.code.kernels_alive()}};
  j["leftover_process_groups"] = leftover;
  j["proxied"] = proxied;
  j["file_operations"] = file_work;
  j["watches"] = {{"open", s.watches.count()}, {"feeds", s.watches.followers()}};
  // Streams a client holds open besides a run's own response: counted, not
  // busy by themselves (a dashboard following along is not work).
  j["streams"] = {{"run_readers", s.executions.readers()},
                  {"journal_followers", s.journal.followers()},
                  {"watch_feeds", s.watches.followers()}};
  j["state_dir"] = state_dir_json(s.executions.budget());
  j["connections"] = s.server.connection_count();
  j["containment"] = pty::containment_mode_name(s.containment.mode());
  // How processes got into their cgroups: a launcher made ahead or born in
  // it are free of a cgroup.procs write at the start; joined ones paid it.
  const auto& starts = s.containment.starts();
  j["starts"] = {{"launcher", starts.launcher},
                 {"clone_into_cgroup", starts.clone_into_cgroup},
                 {"joined", starts.joined},
                 {"uncontained", starts.none},
                 {"keeper", starts.keeper},
                 {"launcher_given_up", starts.launcher_given_up},
                 {"child_given_up", starts.child_given_up}};
  if (!s.containment.last_given_up().empty()) j["last_given_up"] = s.containment.last_given_up();
  j["spare_launchers"] = s.containment.waiting_launchers();
  ex.respond_json(200, j.dump(-1, ' ', false, ojson::error_handler_t::replace));
}

ojson outcome_json(const pty::FreezeOutcome& o, bool frozen) {
  ojson j;
  j["frozen"] = frozen;
  j["detail"] = o.detail;
  j["cgroups"] = o.cgroups;
  j["processes"] = o.processes;
  j["took_ms"] = o.took_ms;
  return j;
}

struct FreezeWait : http::Awaitable {};

void handle_freeze(PauseService& s, http::Exchange& ex) {
  uint64_t timeout = static_cast<uint64_t>(s.ctx.config.freeze_timeout_ms);
  if (const std::string* raw = protocol::query_value(ex.query, "timeout"); raw && !raw->empty()) {
    auto v = protocol::parse_offset(*raw);
    if (!v || *v == 0 || *v > 600000)
      return ex.respond_error(400, codes::kInvalidRequestBody, "timeout must be milliseconds between 1 and 600000");
    timeout = *v;
  }
  auto wait = std::make_shared<FreezeWait>();
  http::await(ex, *wait);
  pty::Containment& c = s.containment;
  c.freeze(uv_now(s.ctx.loop) + timeout, [wait, &c](pty::FreezeOutcome o) {
    http::Exchange* ex = wait->exchange();
    if (!ex) return;  // the freeze stands (or was undone at its deadline) either way
    if (!o.ok) {
      ojson j = outcome_json(o, c.frozen());
      j["code"] = o.status == 501 ? "NOT_SUPPORTED" : o.status == 504 ? "FREEZE_TIMEOUT" : "FREEZE_FAILED";
      j["message"] = o.detail;
      return ex->respond_json(o.status, j.dump());
    }
    ex->respond_json(200, outcome_json(o, true).dump());
  });
}

void handle_thaw(PauseService& s, http::Exchange& ex) {
  pty::FreezeOutcome o = s.containment.thaw();
  if (!o.ok) {
    ojson j = outcome_json(o, s.containment.frozen());
    j["code"] = o.status == 501 ? "NOT_SUPPORTED" : "THAW_FAILED";
    j["message"] = o.detail;
    return ex.respond_json(o.status, j.dump());
  }
  ojson j = outcome_json(o, false);
  j["frozen_ms"] = o.took_ms;
  ex.respond_json(200, j.dump());
}

}  // namespace

void add_pause_routes(RouteTable& routes, PauseService& svc) {
  routes.add("GET", "/activity", [&svc](http::Exchange& ex) { handle_activity(svc, ex); });
  routes.add("POST", "/freeze", [&svc](http::Exchange& ex) { handle_freeze(svc, ex); });
  routes.add("POST", "/thaw", [&svc](http::Exchange& ex) { handle_thaw(svc, ex); });
}

}  // namespace execd::api
