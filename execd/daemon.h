// execd/daemon: the one object that owns a running execd: the loop it runs
// on, the reaper, the HTTP server, the route table and every registry
// (commands, bash sessions, PTY sessions) and the metrics sampler. Built once by main; there are no
// globals. shutdown() (SIGTERM/SIGINT) stops accepting, forwards the signal
// to every command, shell and terminal, lets open streams drain within the
// grace period, then kills what is left and lets the loop end.
#pragma once

#include <uv.h>

#include <memory>

#include "execd/api/code.h"
#include "execd/api/commands.h"
#include "execd/api/journal.h"
#include "execd/api/metrics.h"
#include "execd/api/proxy.h"
#include "execd/api/pty.h"
#include "execd/api/sessions.h"
#include "execd/context.h"
#include "execd/http/server.h"
#include "execd/routes.h"
#include "pty/reaper.h"

namespace execd {

class Daemon {
 public:
  // `ctx.config` and `ctx.base_env` are filled in; the rest is set up here.
  Daemon(uv_loop_t* loop, Context ctx);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // 0 or a negative errno / libuv error.
  int listen();
  int bound_port() const { return server_.bound_port(); }
  const Context& ctx() const { return ctx_; }
  // Runs the loop until shutdown has finished.
  void run();
  void shutdown(int signum);

 private:
  void on_tick();
  void finish();
  bool drained() const;

  uv_loop_t* loop_;
  Context ctx_;
  pty::Reaper reaper_;
  pty::Containment containment_;
  RouteTable routes_;
  http::Server server_;
  api::Journal journal_;  // before the registries: reloading records writes to it
  api::CommandRegistry commands_;
  api::SessionRegistry sessions_;
  api::PtyRegistry ptys_;
  api::MetricsService metrics_;
  api::ProxyService proxy_;
  api::CodeRegistry code_;
  uv_signal_t sigterm_, sigint_;
  uv_timer_t housekeeping_;
  uint64_t deadline_ = 0;
  bool stopping_ = false, finished_ = false;
};

}  // namespace execd
