// execd/daemon: see header.
#include "execd/daemon.h"

#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "execd/api/api.h"
#include "protocol/errors.h"
#include "execd/lifecycle/status_file.h"
#include "execd/api/journal.h"
#include "execd/api/proxy.h"
#include "execd/api/envd/connect_rpc.h"
#include "execd/api/envd/files.h"
#include "pty/launcher.h"
#include "pty/cgroup.h"
#include "pty/command.h"
#include "pty/spawn.h"

namespace execd {

namespace {
constexpr uint64_t kHousekeepingMs = 1000;
constexpr size_t kTrimFreeBytes = 16 << 20;
constexpr uint64_t kShutdownPollMs = 20;

Context with_loop(Context ctx, uv_loop_t* loop) {
  ctx.loop = loop;
  return ctx;
}

exec::RegistrySettings registry_settings(const Config& cfg) {
  exec::RegistrySettings s;
  s.state_dir = cfg.state_dir;
  s.retention_ms = cfg.retention_ms;
  s.max_records = cfg.max_records;
  s.log_limit = static_cast<uint64_t>(cfg.log_limit_bytes);
  s.budget.cap_bytes = static_cast<uint64_t>(cfg.state_budget_bytes);
  s.budget.share_percent = static_cast<unsigned>(cfg.state_budget_percent);
  s.budget.floor_percent = static_cast<unsigned>(cfg.state_floor_percent);
  s.budget.journal_max_bytes = cfg.journal ? static_cast<uint64_t>(cfg.journal_max_bytes) : 0;
  return s;
}

exec::LaunchSettings launch_settings(const Config& cfg) {
  exec::LaunchSettings s;
  s.max_running = cfg.max_running;
  s.track.max_entries = static_cast<size_t>(cfg.track_max_entries);
  s.track.hash_max_bytes = static_cast<uint64_t>(cfg.track_hash_max_bytes);
  return s;
}

watch::Settings watch_settings(const Config& cfg) {
  watch::Settings s;
  s.max_watches = static_cast<size_t>(cfg.max_watches);
  s.ring_bytes = static_cast<size_t>(cfg.watch_ring_bytes);
  s.max_dirs = static_cast<size_t>(cfg.watch_max_dirs);
  s.retention_ms = static_cast<uint64_t>(cfg.watch_retention_ms);
  s.coalesce_ms = static_cast<uint64_t>(cfg.watch_coalesce_ms);
  return s;
}

http::ConnectionLimits connection_limits(const Config& cfg) {
  http::ConnectionLimits l;
  l.parser.max_body_bytes = static_cast<size_t>(cfg.max_body_bytes);
  l.idle_timeout_ms = static_cast<uint64_t>(cfg.idle_timeout_ms);
  l.header_timeout_ms = static_cast<uint64_t>(cfg.header_timeout_ms);
  l.body_timeout_ms = static_cast<uint64_t>(cfg.body_timeout_ms);
  // Connections never take the descriptors that commands, files and the
  // daemon itself need: an eighth of the limit (at least 64) stays free.
  l.max_connections = static_cast<size_t>(cfg.max_connections);
  struct rlimit nofile {};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY) {
    uint64_t reserve = std::max<uint64_t>(64, nofile.rlim_cur / 8);
    uint64_t usable = nofile.rlim_cur > reserve + 16 ? nofile.rlim_cur - reserve : 16;
    l.max_connections = std::min<uint64_t>(l.max_connections, usable);
  }
  return l;
}
}  // namespace

Daemon::Daemon(uv_loop_t* loop, Context ctx, const pty::ChildSetup& children)
    : loop_(loop),
      ctx_(with_loop(std::move(ctx), loop)),
      reaper_(loop),
      runtime_{loop, reaper_, containment_, children},
      access_(ctx_.config),
      routes_(access_, Listener::execd,
              [](http::Exchange& ex) {
                // The operation routes answer in their own words (OpenSandbox PR 1771).
                if (!api::respond_operations_unauthorized(ex))
                  ex.respond_error(401, protocol::codes::kUnauthorized, "invalid or missing header X-EXECD-ACCESS-TOKEN");
              }),
      server_(loop, connection_limits(ctx_.config), [this](http::Exchange& ex) { routes_.route(ex); }),
      file_gate_(kPoolThreads / 2),
      journal_(ctx_, file_gate_),
      watches_(loop, watch_settings(ctx_.config), activity_),
      executions_(loop, registry_settings(ctx_.config), journal_, activity_),
      launches_(executions_, watches_, launch_settings(ctx_.config)),
      commands_{ctx_, runtime_, executions_, watches_, launches_},
      entrypoint_(ctx_.config.entrypoint.empty()
                      ? nullptr
                      : std::make_unique<Entrypoint>(runtime_, ctx_.config.entrypoint,
                                                     [this](int status) { entrypoint_exited(status); })),
      binding_(ctx_, access_, executions_,
               [this](protocol::CommandRequest req, std::string& error) {
                 return api::start_trusted_command(commands_, std::move(req), error);
               },
               entrypoint_.get()),
      sessions_(ctx_, runtime_, launches_),
      ptys_(ctx_, runtime_, journal_),
      operations_(ctx_.config.operation_capacity),
      operations_api_{ctx_, access_, operations_, commands_, ptys_},
      files_{ctx_, file_gate_, journal_, nullptr, nullptr, {}, &executions_.budget()},
      file_identities_(files_),
      metrics_(ctx_),
      proxy_(ctx_),
      code_(ctx_, runtime_, launches_),
      envd_routes_(access_, Listener::e2b, api::rpc::respond_unauthenticated),
      envd_server_(loop, connection_limits(ctx_.config), [this](http::Exchange& ex) { envd_routes_.route(ex); }),
      ci_server_(loop, connection_limits(ctx_.config), [this](http::Exchange& ex) { envd_routes_.route(ex); }),
      envd_processes_(ctx_, runtime_, launches_),
      envd_fs_(ctx_),
      pause_api_{ctx_, activity_, executions_, journal_, sessions_, ptys_, code_, proxy_, file_gate_, watches_, containment_,
                    server_},
      isolated_(ctx_, runtime_, launches_, watches_) {
  reaper_.start();
  // The OOM killer takes a command before the daemon (children get
  // pty::kChildOomScoreAdj as they start).
  if (!pty::protect_from_oom_killer(pty::kDaemonOomScoreAdj))
    spdlog::info("oom_score_adj of execd stays as it was ({}); commands still get {}", strerror(errno),
                 pty::kChildOomScoreAdj);
  spdlog::info("{}", containment_.init(loop, ctx_.config.cgroups, ctx_.config.cgroup_parent));
  pty::remember_daemon_oom_score_adj();
  containment_.enable_launchers(&reaper_, &children, static_cast<size_t>(ctx_.config.cgroup_spares));
  // The containment mode rides along as a header: the body stays empty, as Go's.
  // What execd could not save (the disk refused it) rides along too, so a
  // control plane that polls /ping learns of it: 0 and 0 when all is on disk.
  auto ping = [this](http::Exchange& ex) {
    ex.respond(200, "", "",
               {std::string("X-Execd-Containment: ") + pty::containment_mode_name(containment_.mode()),
                "X-Execd-Unsaved-Records: " + std::to_string(executions_.records().unsaved()),
                "X-Execd-Unsaved-Journal: " + std::to_string(journal_.unsaved()),
                "X-Execd-Cold-Records: " + std::to_string(executions_.cold())});
  };
  routes_.add("GET", "/ping", ping, kProbe);
  routes_.add("HEAD", "/ping", ping, kProbe);
  api::add_command_routes(routes_, commands_, sessions_);
  api::add_session_routes(routes_, sessions_);
  api::add_pty_routes(routes_, ptys_);
  api::add_operation_routes(routes_, operations_api_);
  // The file routes as execd, and as any user under /v1/filesystem/{uid}/{gid}.
  api::FileServiceFor as_execd = [this](http::Exchange&) { return &files_; };
  api::FileServiceFor as_user = [this](http::Exchange& ex) { return file_identities_.service_for(ex); };
  for (const auto& [prefix, service] : {std::pair{std::string(), as_execd},
                                        std::pair{std::string("/v1/filesystem/:uid/:gid"), as_user}}) {
    api::add_file_routes(routes_, prefix, service);
    api::add_upload_route(routes_, prefix, service);
    api::add_download_route(routes_, prefix, service);
  }
  api::add_archive_routes(routes_, files_);
  api::add_metrics_routes(routes_, metrics_, executions_.budget());
  api::add_journal_routes(routes_, journal_);
  api::add_proxy_routes(routes_, proxy_);
  api::add_code_routes(routes_, code_, commands_, sessions_);
  // The reset before a binding (OpenSandbox's Controller.Reset): what the
  // warm-up started goes, through each registry's own kill path; the
  // entrypoint stays (its policy decides), finished records stay readable.
  binding_.set_reset([this] {
    size_t runs = executions_.running(), kernels = code_.kernels_alive();
    size_t shells = sessions_.count(), terminals = ptys_.count(), isolated = isolated_.count();
    executions_.signal_all(SIGKILL);
    sessions_.remove_all();
    ptys_.remove_all();
    isolated_.remove_all();
    code_.shutdown_all();
    code_.kill_all();
    spdlog::info("runtime init reset: killed {} running command(s), {} bash session(s), {} PTY session(s), "
                 "{} isolated session(s), {} kernel(s)",
                 runs, shells, terminals, isolated, kernels);
  });
  api::add_runtime_routes(routes_, binding_);
  if (ctx_.config.envd_port >= 0 || ctx_.config.code_interpreter_port >= 0) {
    api::add_envd_process_routes(envd_routes_, envd_processes_);
    api::add_envd_filesystem_routes(envd_routes_, envd_fs_, files_);
    api::add_envd_file_routes(envd_routes_, access_, files_, metrics_);
    api::add_e2b_code_routes(envd_routes_, code_, commands_);
  }
  api::add_watch_routes(routes_, watches_);
  api::add_pause_routes(routes_, pause_api_);
  routes_.set_activity(&activity_);
  for (RouteTable* t : {&routes_, &envd_routes_}) t->set_containment(&containment_);
  ptys_.set_activity(&activity_);
  // Actors that are not runs, for track_changes: terminals, file work
  // through the API, processes finished commands left behind (counted by
  // their members: an emptied cgroup waits for the next tick's rmdir and is
  // nobody's actor; keepers' trees count too).
  activity_.set_probe([this](std::vector<std::string>& out) {
    ptys_.actors(out);
    if (file_gate_.running() > 0) out.emplace_back("file-api");
    if (containment_.lingering_with_members() > 0) out.emplace_back("leftover-processes");
  });
  api::add_isolated_routes(routes_, isolated_, files_);

  for (uv_signal_t* s : {&sigterm_, &sigint_}) {
    uv_signal_init(loop, s);
    s->data = this;
  }
  auto on_signal = [](uv_signal_t* h, int signum) { static_cast<Daemon*>(h->data)->on_signal(signum); };
  uv_signal_start(&sigterm_, on_signal, SIGTERM);
  uv_signal_start(&sigint_, on_signal, SIGINT);
  if (entrypoint_) {
    forwarding_ = true;
    const int more[4] = {SIGHUP, SIGUSR1, SIGUSR2, SIGWINCH};
    for (int i = 0; i < 4; ++i) {
      uv_signal_init(loop, &forwarded_[i]);
      forwarded_[i].data = this;
      uv_signal_start(&forwarded_[i], on_signal, more[i]);
    }
  }
  uv_timer_init(loop, &housekeeping_);
  housekeeping_.data = this;
  uv_timer_start(&housekeeping_, [](uv_timer_t* t) { static_cast<Daemon*>(t->data)->on_tick(); }, kHousekeepingMs,
                 kHousekeepingMs);
  uv_unref(reinterpret_cast<uv_handle_t*>(&housekeeping_));
}

Daemon::~Daemon() { containment_.shutdown(); }

int Daemon::listen() {
  const Config& cfg = ctx_.config;
  if (cfg.tcp) {
    if (int rc = server_.listen(cfg.host, cfg.port); rc != 0) return rc;
    proxy_.set_own_port(server_.bound_port());
  }
  if (cfg.vsock_port) {
    if (int rc = server_.listen_vsock(cfg.vsock_port); rc != 0) return rc;
  }
  return 0;
}

int Daemon::listen_e2b() {
  const Config& c = ctx_.config;
  if (c.envd_port >= 0)
    if (int rc = envd_server_.listen(c.envd_host, c.envd_port); rc != 0) return rc;
  if (c.code_interpreter_port >= 0)
    if (int rc = ci_server_.listen(c.envd_host, c.code_interpreter_port); rc != 0) return rc;
  return 0;
}

void Daemon::run() {
  std::string error;
  const Config& cfg = ctx_.config;
  if (!cfg.runtime_init) {
    // Classic startup has no hooks of its own (they come with a binding):
    // ready at once. A lifecycle configuration is not read: say so.
    std::string lifecycle = lifecycle::lifecycle_config_path(ctx_.base_env);
    struct stat st;
    if (!lifecycle.empty() && stat(lifecycle.c_str(), &st) == 0)
      spdlog::warn("lifecycle configuration {} is not read: execd runs hooks only from POST /internal/init",
                   lifecycle);
    if (const char* inline_config = env_lookup(ctx_.base_env, "OPENSANDBOX_LIFECYCLE"); inline_config && *inline_config)
      spdlog::warn("OPENSANDBOX_LIFECYCLE is not read: execd runs hooks only from POST /internal/init");
    if (!cfg.lifecycle_status_file.empty()) {
      // Upstream's classic startup fails closed when bootstrap's channel is gone.
      if (std::string err = lifecycle::append_lifecycle_status(cfg.lifecycle_status_file, "done 0"); !err.empty()) {
        spdlog::error("lifecycle startup status: {}", err);
        exit_status_ = 1;
        shutdown(SIGTERM);
        uv_run(loop_, UV_RUN_DEFAULT);
        return;
      }
    }
  }
  // Started once execd listens: what it runs can reach execd at once.
  if (entrypoint_ && !entrypoint_->start(ctx_.child_env(), error)) {
    spdlog::error("the entrypoint could not start: {}", error);
    exit_status_ = error.find("permission denied") != std::string::npos ? 126 : 127;  // as a shell says
    shutdown(SIGTERM);
  }
  uv_run(loop_, UV_RUN_DEFAULT);
}

bool Daemon::drained() const {
  return executions_.running() == 0 && connections() == 0 && code_.kernels_alive() == 0;
}

size_t Daemon::connections() const {
  return server_.connection_count() + envd_server_.connection_count() + ci_server_.connection_count();
}

void Daemon::on_tick() {
  ptys_.reap();
  if (!stopping_) {
    // After a burst (hundreds of commands, big uploads, searches), give
    // freed memory back: glibc keeps it otherwise. When quiet, always; under
    // load (an SDK keeps its connections open), once a lot lies free.
    bool quiet = executions_.running() == 0 && connections() == 0;
    // Finished executions nobody uses go cold first (exec/cold_records):
    // their objects are what pins the heap pages around them.
    // While clients are connected, one stays as it is for --cold-after (a
    // client asks for its status and output right after the end).
    executions_.cool(quiet ? 0 : ctx_.config.cold_after_ms);
    if (quiet || mallinfo2().fordblks > kTrimFreeBytes) malloc_trim(0);
    return;
  }
  for (http::Server* s : {&server_, &envd_server_, &ci_server_}) s->close_idle_connections();
  if (drained() || uv_now(loop_) >= deadline_) {
    if (!drained())
      spdlog::warn("shutdown: {} executions and {} connections still open after the grace period", executions_.running(),
                   connections());
    finish();
  }
}

void Daemon::on_signal(int signum) {
  // While the entrypoint runs, it decides: execd follows when it exits.
  if (entrypoint_ && entrypoint_->running()) return entrypoint_->forward(signum);
  if (signum == SIGTERM || signum == SIGINT) shutdown(signum);
}

void Daemon::entrypoint_exited(int status) {
  exit_status_ = status;
  spdlog::info("the entrypoint ended with status {}: execd stops", status);
  shutdown(SIGTERM);
}

void Daemon::shutdown(int signum) {
  if (stopping_) {
    deadline_ = 0;  // a second signal: stop waiting
    return;
  }
  stopping_ = true;
  // Frozen processes would take no signal until thawed.
  if (containment_.frozen()) containment_.thaw();
  executions_.stop_accepting();
  spdlog::info("{} received: forwarding to running commands, draining for {} ms", strsignal(signum),
               ctx_.config.graceful_shutdown_ms);
  for (http::Server* s : {&server_, &envd_server_, &ci_server_}) {
    s->stop_accepting();
    s->close_idle_connections();
  }
  executions_.signal_all(signum);
  // Terminals and shells have no graceful protocol: they go now, so an
  // attached PTY WebSocket does not hold the shutdown for the grace period.
  sessions_.kill_all();
  ptys_.kill_all();
  isolated_.kill_all();
  code_.shutdown_all();
  deadline_ = uv_now(loop_) + static_cast<uint64_t>(ctx_.config.graceful_shutdown_ms);
  uv_timer_start(&housekeeping_, [](uv_timer_t* t) { static_cast<Daemon*>(t->data)->on_tick(); }, 0,
                 kShutdownPollMs);
  uv_ref(reinterpret_cast<uv_handle_t*>(&housekeeping_));
}

void Daemon::finish() {
  if (finished_) return;
  finished_ = true;
  for (http::Server* s : {&server_, &envd_server_, &ci_server_}) {
    s->stop_accepting();
    s->close_all_connections();
  }
  executions_.signal_all(SIGKILL);
  sessions_.kill_all();
  ptys_.kill_all();
  isolated_.kill_all();
  code_.kill_all();
  // Whatever the commands left behind, setsid() or not.
  containment_.kill_everything();
  uv_timer_stop(&housekeeping_);
  uv_close(reinterpret_cast<uv_handle_t*>(&housekeeping_), nullptr);
  // Closing connections need a safe point to stop their sources (which cuts
  // every link into the registries); then the registries let go of their
  // processes and handles, the server closes its own, and the loop ends.
  auto* last = new uv_timer_t;
  uv_timer_init(loop_, last);
  last->data = this;
  uv_timer_start(last, [](uv_timer_t* t) {
    auto* d = static_cast<Daemon*>(t->data);
    if (d->connections() > 0) return;  // still closing
    d->ptys_.clear();
    d->sessions_.clear();
    d->isolated_.clear();
    d->executions_.close();
    d->watches_.close();
    d->journal_.close();
    d->code_.close();
    d->metrics_.close();
    d->proxy_.close();
    d->envd_fs_.close();
    d->server_.close_handles();
    d->envd_server_.close_handles();
    d->ci_server_.close_handles();
    d->containment_.shutdown();
    d->containment_.close();
    d->reaper_.stop();
    // Until here a second SIGTERM only cut the grace period short (closed
    // in finish(), their default action ended execd before this cleanup).
    // Closing them restores that action: ignored instead, as nothing is
    // left to do but exit.
    uv_close(reinterpret_cast<uv_handle_t*>(&d->sigterm_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&d->sigint_), nullptr);
    if (d->forwarding_)
      for (uv_signal_t& f : d->forwarded_) uv_close(reinterpret_cast<uv_handle_t*>(&f), nullptr);
    d->binding_.close();
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    uv_close(reinterpret_cast<uv_handle_t*>(t), [](uv_handle_t* h) { delete reinterpret_cast<uv_timer_t*>(h); });
  }, 0, 10);
}

}  // namespace execd
