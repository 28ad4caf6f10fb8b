// execd/lifecycle/runtime_binding: binding a warm-pool execd to its sandbox
// (--runtime-init or EXECD_RUNTIME_INIT; OpenSandbox PR 1871, OSEP-0020/0021;
// its routes, POST /internal/init = /init and GET /ready, are
// api/runtime_binding): one-shot, a binding brings the sandbox id and
// generation, the token's SHA-256, the environment every later process
// gets, telemetry attributes, lifecycle hooks and the entrypoint policy;
// execd is ready once bound and the preStart hooks have run.
// Before the binding is applied, whatever the warm-up left runs no more
// (the reset the daemon hands in: commands, sessions, PTYs, kernels).
// Hooks run as trusted background commands (ids lifecycle-<phase>-<name>-
// <generation>[-<n>]): their output and results are in /command/status,
// /logs and the journal like any command's.
#pragma once

#include <uv.h>

#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "execd/access.h"
#include "execd/context.h"
#include "execd/entrypoint.h"
#include "execd/exec/registry.h"
#include "protocol/errors.h"
#include "protocol/requests.h"
#include "protocol/runtime_init.h"

namespace execd::lifecycle {

class RuntimeBinding {
 public:
  // Starts a hook as a trusted background command (api/commands'
  // start_trusted_command); false with `error` when it cannot even be
  // created.
  using StartCommand = std::function<bool(protocol::CommandRequest req, std::string& error)>;
  // `entrypoint` may be null (execd runs none).
  RuntimeBinding(const Context& ctx, Access& access, exec::Registry& executions, StartCommand start_command,
                 Entrypoint* entrypoint);
  ~RuntimeBinding();
  RuntimeBinding(const RuntimeBinding&) = delete;
  RuntimeBinding& operator=(const RuntimeBinding&) = delete;

  // What runs before a binding is applied: kills what the warm-up left.
  void set_reset(std::function<void()> reset) { reset_ = std::move(reset); }

  // Applies a binding (POST /internal/init): the warnings for its answer,
  // or why not (409 bound already, 400 no token at all, 503 stopping).
  std::variant<protocol::ApiError, std::vector<std::string>> bind(protocol::InitRequest r);
  // What GET /ready reports.
  bool initialized() const { return initialized_; }
  bool ready() const { return ready_; }
  const protocol::InitRequest& bound() const { return bound_; }
  const std::string& pre_start_error() const { return pre_start_error_; }
  const Context& ctx() const { return ctx_; }
  // Shutdown: no more periodic hooks; the timer handle is closed.
  void close();

 private:
  struct Periodic {
    protocol::LifecycleHook hook;
    uint64_t next_ms = 0;
    std::string last_id;
    uint64_t runs = 0;
  };
  void on_tick();
  bool start_hook(const protocol::LifecycleHook& hook, const std::string& id, std::string& error);
  // The preStart hook now running has ended: the next one, or ready.
  void advance_pre_start();
  void all_started();
  bool done(const std::string& id) const;
  // A line for --lifecycle-startup-status-file, if given.
  void status_line(const std::string& line);

  const Context& ctx_;
  Access& access_;
  exec::Registry& executions_;
  StartCommand start_command_;
  Entrypoint* entrypoint_;
  std::function<void()> reset_;
  bool initialized_ = false, ready_ = false, closed_ = false;
  protocol::InitRequest bound_;
  size_t pre_start_next_ = 0;
  std::string pre_start_running_, pre_start_error_;
  std::vector<Periodic> periodic_;
  uv_timer_t timer_;
};

}  // namespace execd::lifecycle
