// execd/lifecycle/runtime_binding: see header.
#include "execd/lifecycle/runtime_binding.h"

#include <spdlog/spdlog.h>

#include "execd/exec/execution.h"
#include "execd/lifecycle/status_file.h"

namespace execd::lifecycle {

namespace {
constexpr uint64_t kBindingTickMs = 50;
// What a preStart hook without a timeout counts as for the watchdog
// (upstream's default preStart timeout).
constexpr int64_t kDefaultHookSeconds = 60;
}  // namespace

void RuntimeBinding::status_line(const std::string& line) {
  const std::string& path = ctx_.config.lifecycle_status_file;
  if (path.empty()) return;
  // As upstream during an apply: logged, never fatal.
  if (std::string err = append_lifecycle_status(path, line); !err.empty())
    spdlog::warn("runtime init: append lifecycle startup status '{}': {}", line, err);
}

RuntimeBinding::RuntimeBinding(const Context& ctx, Access& access, exec::Registry& executions,
                               StartCommand start_command, Entrypoint* entrypoint)
    : ctx_(ctx), access_(access), executions_(executions), start_command_(std::move(start_command)),
      entrypoint_(entrypoint) {
  uv_timer_init(ctx_.loop, &timer_);
  timer_.data = this;
  uv_unref(reinterpret_cast<uv_handle_t*>(&timer_));
  // (Access holds every listener until bind() when runtime_init is set.)
  if (!ctx_.config.runtime_init) ready_ = true;  // nothing to wait for
}

RuntimeBinding::~RuntimeBinding() { close(); }

void RuntimeBinding::close() {
  if (closed_) return;
  closed_ = true;
  uv_timer_stop(&timer_);
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
}

std::variant<protocol::ApiError, std::vector<std::string>> RuntimeBinding::bind(protocol::InitRequest r) {
  namespace codes = protocol::codes;
  if (initialized_)
    return protocol::ApiError{409, "ALREADY_INITIALIZED",
                              "execd is already bound to sandbox " + bound_.sandbox_id + " generation " +
                                  std::to_string(bound_.generation)};
  if (r.token_sha256.empty() && !access_.has_execd_token() && !ctx_.config.insecure_no_auth)
    return protocol::ApiError{400, std::string(codes::kInvalidRequestBody),
                              "accessTokenHash is required: execd has no token of its own"};
  if (closed_ || !executions_.accepting())
    return protocol::ApiError{503, std::string(codes::kRuntimeError), "execd is shutting down"};
  std::vector<std::string> warnings = std::move(r.warnings);
  if (r.restart_entrypoint && !entrypoint_)
    warnings.push_back("entrypointPolicy restart: execd runs no entrypoint (started without --init -- CMD)");
  initialized_ = true;
  // Without --runtime-init too (upstream: "accepted any time and becomes
  // authoritative on apply"): not ready again until the preStart hooks ran.
  ready_ = false;
  bound_ = std::move(r);
  // What the warm-up left dies before anything of the binding runs.
  if (reset_) reset_();
  Binding& b = *ctx_.binding;
  b.envs = bound_.envs;
  b.sandbox_id = bound_.sandbox_id;
  b.generation = bound_.generation;
  b.telemetry_attributes = bound_.telemetry_attributes;
  access_.bind(bound_.token_sha256);
  spdlog::info("bound to sandbox {} generation {} ({} envs, {} preStart and {} periodic hooks)", bound_.sandbox_id,
               bound_.generation, bound_.envs.size(), bound_.pre_start.size(), bound_.periodic.size());
  uint64_t now = uv_now(ctx_.loop);
  for (const auto& h : bound_.periodic) {
    Periodic p;
    p.hook = h;
    p.next_ms = now + static_cast<uint64_t>(h.interval_ms);
    periodic_.push_back(std::move(p));
  }
  if (!bound_.pre_start.empty()) {
    int64_t seconds = 0;
    for (const auto& h : bound_.pre_start)
      seconds += h.timeout_ms > 0 ? (h.timeout_ms + 999) / 1000 : kDefaultHookSeconds;
    status_line("running " + std::to_string(seconds));
  }
  uv_timer_start(&timer_, [](uv_timer_t* t) { static_cast<RuntimeBinding*>(t->data)->on_tick(); }, 0, kBindingTickMs);
  return warnings;
}

bool RuntimeBinding::start_hook(const protocol::LifecycleHook& hook, const std::string& id, std::string& error) {
  protocol::CommandRequest req;
  req.id = id;
  req.command = hook.command;
  req.argv = hook.argv;
  req.timeout_ms = hook.timeout_ms;
  return start_command_(std::move(req), error);
}

bool RuntimeBinding::done(const std::string& id) const {
  const exec::Execution* e = executions_.find(id);
  return !e || e->done();  // gone: discarded before it started
}

void RuntimeBinding::advance_pre_start() {
  if (!pre_start_running_.empty()) {
    const exec::Execution* e = executions_.find(pre_start_running_);
    protocol::ExecutionResult res;
    if (e) res = e->result();
    bool ok = e && res.start_error.empty() && res.exit_code && *res.exit_code == 0;
    if (!ok) {
      pre_start_error_ = "preStart hook " + bound_.pre_start[pre_start_next_ - 1].name + " failed (" +
                         (!e ? std::string("not started")
                             : !res.start_error.empty() ? res.start_error
                             : res.exit_code ? "exit code " + std::to_string(*res.exit_code)
                                             : "signal " + res.signal) +
                         "): see /command/status/" + pre_start_running_;
      spdlog::warn("{}", pre_start_error_);
      status_line("done 1");
      pre_start_running_.clear();
      return;  // not ready, ever: the sandbox is not what was asked for
    }
    pre_start_running_.clear();
  }
  if (pre_start_next_ < bound_.pre_start.size()) {
    const auto& hook = bound_.pre_start[pre_start_next_++];
    std::string id = "lifecycle-prestart-" + hook.name + "-" + std::to_string(bound_.generation), error;
    if (!start_hook(hook, id, error)) {
      pre_start_error_ = "preStart hook " + hook.name + " could not start: " + error;
      status_line("done 1");
      return;
    }
    pre_start_running_ = id;
    return;
  }
  all_started();
}

void RuntimeBinding::all_started() {
  if (ready_) return;
  status_line("done 0");
  if (entrypoint_ && bound_.restart_entrypoint) entrypoint_->restart(ctx_.child_env());
  ready_ = true;
  spdlog::info("sandbox {} generation {} ready", bound_.sandbox_id, bound_.generation);
}

void RuntimeBinding::on_tick() {
  if (closed_) return;
  if (!ready_ && pre_start_error_.empty() && (pre_start_running_.empty() || done(pre_start_running_)))
    advance_pre_start();
  if (!ready_ && !pre_start_error_.empty()) {
    uv_timer_stop(&timer_);  // never ready: nothing more to do
    return;
  }
  if (!ready_ || !executions_.accepting()) return;
  uint64_t now = uv_now(ctx_.loop);
  for (Periodic& p : periodic_) {
    if (now < p.next_ms) continue;
    p.next_ms = now + static_cast<uint64_t>(p.hook.interval_ms);
    if (!p.last_id.empty() && !done(p.last_id)) continue;  // still running: this turn is skipped
    std::string id = "lifecycle-periodic-" + p.hook.name + "-" + std::to_string(bound_.generation) + "-" +
                     std::to_string(++p.runs),
                error;
    if (start_hook(p.hook, id, error)) p.last_id = id;
    else spdlog::warn("periodic hook {} not started: {}", p.hook.name, error);
  }
  if (periodic_.empty()) uv_timer_stop(&timer_);
}

}  // namespace execd::lifecycle
