// execd/daemon: the one object that owns a running execd: the reaper and the
// containment (the process runtime), the HTTP server, the route table, the
// journal, the record store and the executions, every registry (bash
// sessions, PTY sessions, code contexts, isolated sessions), the file gate,
// the metrics sampler and the proxy; and, for E2B's SDKs, the envd listener
// (and the code-interpreter one) with their own route table and token, the
// envd process and filesystem services. Built once by main; each part gets the others it needs when
// it is built, in the order of the members below. shutdown() (SIGTERM/SIGINT)
// stops accepting, forwards the signal to every command, shell and terminal,
// lets open streams drain within the grace period, then kills what is left
// and lets the loop end. With an entrypoint (--init -- CMD), SIGTERM and the
// other signals a container's init gets go to the entrypoint instead, and
// its exit is what shuts execd down.
#pragma once

#include <uv.h>

#include <memory>

#include "execd/api/pause.h"
#include "execd/api/code.h"
#include "execd/api/commands.h"
#include "execd/api/envd/filesystem.h"
#include "execd/api/envd/process.h"
#include "execd/files/file_identities.h"
#include "execd/files/file_jobs.h"
#include "execd/api/isolated.h"
#include "execd/api/journal.h"
#include "execd/api/operations.h"
#include "execd/metrics/service.h"
#include "execd/proxy/proxy.h"
#include "execd/api/pty.h"
#include "execd/api/runtime_binding.h"
#include "execd/api/sessions.h"
#include "execd/api/watch.h"
#include "execd/activity.h"
#include "execd/context.h"
#include "execd/entrypoint.h"
#include "execd/exec/launch.h"
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
  // The E2B listeners that were asked for (--envd-port, --code-interpreter-port).
  int listen_e2b();
  int bound_port() const { return server_.bound_port(); }
  int envd_port() const { return envd_server_.bound_port(); }
  int code_interpreter_port() const { return ci_server_.bound_port(); }
  const Context& ctx() const { return ctx_; }
  // Runs the loop until shutdown has finished.
  void run();
  void shutdown(int signum);
  // What execd exits with: the entrypoint's status (--init -- CMD), else 0.
  int exit_status() const { return exit_status_; }

 private:
  void on_tick();
  void on_signal(int signum);
  void entrypoint_exited(int status);
  void finish();
  bool drained() const;
  size_t connections() const;

  uv_loop_t* loop_;
  const Context ctx_;
  pty::Reaper reaper_;
  pty::Containment containment_;
  pty::Runtime runtime_;
  Access access_;  // who may call what, on every listener (before the tables that ask it)
  RouteTable routes_;
  http::Server server_;
  WorkGate file_gate_;  // before the journal: its readers go through it
  journal::Journal journal_;
  Activity activity_;
  watch::Hub watches_;         // before the executions: their trackers lease watches
  exec::Registry executions_;  // reloading records writes to the journal
  exec::LaunchPath launches_;  // the one way every kind of run starts
  api::CommandService commands_;
  std::unique_ptr<Entrypoint> entrypoint_;  // --init -- CMD
  lifecycle::RuntimeBinding binding_;
  sessions::SessionRegistry sessions_;
  sessions::PtyRegistry ptys_;
  exec::OperationStore operations_;        // caller-bound creation records (execd/api/operations)
  api::OperationService operations_api_;
  files::FileService files_;
  files::FileIdentities file_identities_;
  metrics::MetricsService metrics_;
  proxy::ProxyService proxy_;
  runners::CodeRegistry code_;
  // E2B: one route table behind both E2B listeners (execd's token or the envd one).
  RouteTable envd_routes_;
  http::Server envd_server_;
  http::Server ci_server_;
  envd::EnvdProcesses envd_processes_;
  envd::EnvdFilesystem envd_fs_;
  api::PauseService pause_api_;
  sessions::IsolatedRegistry isolated_;  // after files_: its sessions' file services share the gate and journal
  uv_signal_t sigterm_, sigint_;
  // With an entrypoint: what a container's init is sent, passed on to it.
  uv_signal_t forwarded_[4];
  bool forwarding_ = false;
  int exit_status_ = 0;
  uv_timer_t housekeeping_;
  uint64_t deadline_ = 0;
  bool stopping_ = false, finished_ = false;
};

}  // namespace execd
