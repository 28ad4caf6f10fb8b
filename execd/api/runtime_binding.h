// execd/api/runtime_binding: binding a warm-pool execd to its sandbox
// (--runtime-init or EXECD_RUNTIME_INIT; OpenSandbox PR 1871, OSEP-0020/0021):
//   POST /internal/init  one-shot (POST /init, its 1.1.1 name, is the same
//                route): sandbox id and generation, the token's SHA-256,
//                the environment every later process gets, telemetry
//                attributes, lifecycle hooks, the entrypoint policy
//   GET  /ready  200 once bound and the preStart hooks have run, else 503
// Before the binding is applied, whatever the warm-up left runs no more
// (the reset the daemon hands in: commands, sessions, PTYs, kernels).
// Hooks run as trusted background commands (ids lifecycle-<phase>-<name>-
// <generation>[-<n>]): their output and results are in /command/status,
// /logs and the journal like any command's.
#pragma once

#include <uv.h>

#include <functional>
#include <string>
#include <vector>

#include "execd/api/commands.h"
#include "execd/context.h"
#include "execd/entrypoint.h"
#include "execd/routes.h"
#include "protocol/runtime_init.h"

namespace execd::api {

class RuntimeBinding {
 public:
  // `entrypoint` may be null (execd runs none).
  RuntimeBinding(const Context& ctx, Access& access, CommandService& commands, Entrypoint* entrypoint);
  ~RuntimeBinding();
  RuntimeBinding(const RuntimeBinding&) = delete;
  RuntimeBinding& operator=(const RuntimeBinding&) = delete;

  // What runs before a binding is applied: kills what the warm-up left.
  void set_reset(std::function<void()> reset) { reset_ = std::move(reset); }

  void handle_init(http::Exchange& ex);
  void handle_ready(http::Exchange& ex);
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
  CommandService& commands_;
  Entrypoint* entrypoint_;
  std::function<void()> reset_;
  bool initialized_ = false, ready_ = false, closed_ = false;
  protocol::InitRequest bound_;
  size_t pre_start_next_ = 0;
  std::string pre_start_running_, pre_start_error_;
  std::vector<Periodic> periodic_;
  uv_timer_t timer_;
};

void add_runtime_routes(RouteTable& routes, RuntimeBinding& binding);

}  // namespace execd::api
