// execd/daemon: the one object that owns a running execd: the reaper and the
// containment (the process runtime), the HTTP server, the route table, the
// journal, the record store and the executions, every registry (bash
// sessions, PTY sessions, code contexts, isolated sessions), the file gate, the metrics sampler
// and the proxy. Built once by main; each part gets the others it needs when
// it is built, in the order of the members below. shutdown() (SIGTERM/SIGINT)
// stops accepting, forwards the signal to every command, shell and terminal,
// lets open streams drain within the grace period, then kills what is left
// and lets the loop end.
#pragma once

#include <uv.h>

#include <memory>

#include "execd/api/code.h"
#include "execd/api/commands.h"
#include "execd/api/file_jobs.h"
#include "execd/api/isolated.h"
#include "execd/api/journal.h"
#include "execd/api/metrics.h"
#include "execd/api/proxy.h"
#include "execd/api/pty.h"
#include "execd/api/sessions.h"
#include "execd/context.h"
#include "execd/exec/registry.h"
#include "execd/http/server.h"
#include "execd/routes.h"
#include "pty/reaper.h"
#include "pty/runtime.h"

namespace execd {

class Daemon {
 public:
  // `ctx` is complete but for the loop, which is set here; `children` is
  // what every process started gets back (main raised the limits).
  Daemon(uv_loop_t* loop, Context ctx, const pty::ChildSetup& children);
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
  const Context ctx_;
  pty::Reaper reaper_;
  pty::Containment containment_;
  pty::Runtime runtime_;
  RouteTable routes_;
  http::Server server_;
  api::WorkGate file_gate_;  // before the journal: its readers go through it
  api::Journal journal_;
  exec::Registry executions_;  // reloading records writes to the journal
  api::CommandService commands_;
  api::SessionRegistry sessions_;
  api::PtyRegistry ptys_;
  api::FileService files_;
  api::MetricsService metrics_;
  api::ProxyService proxy_;
  api::CodeRegistry code_;
  api::IsolatedRegistry isolated_;  // after files_: its sessions' file routes share the gate and journal
  uv_signal_t sigterm_, sigint_;
  uv_timer_t housekeeping_;
  uint64_t deadline_ = 0;
  bool stopping_ = false, finished_ = false;
};

}  // namespace execd
