// execd/main: start-up, as a sequence of named steps. main() reads the
// command line, sets up logging and what every child inherits, claims the
// state directory, then builds the Daemon (which owns everything else,
// shutdown included) and runs it. Each step's details live in its own file
// (execd/config, logging, secrets, state_dir, malloc_tuning, power_off) or
// in the helpers just below.
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "execd/work_gate.h"
#include "protocol/runtime_init.h"
#include "execd/config.h"
#include "execd/context.h"
#include "execd/daemon.h"
#include "execd/logging.h"
#include "execd/malloc_tuning.h"
#include "execd/power_off.h"
#include "execd/runners/command_spawn.h"
#include "execd/secrets.h"
#include "execd/state_dir.h"
#include "pty/hardening.h"
#include "pty/keeper.h"
#include "pty/namespaces.h"
#include "pty/spawn.h"

namespace {

// Parses the command line; an exit status when execd is done already (a
// bad flag: 2; --help, --help-markdown, --version: 0).
std::optional<int> read_command_line(int argc, char** argv, execd::Config& cfg) {
  std::string err = execd::parse_config(argc, argv, cfg);
  if (!err.empty()) {
    fprintf(stderr, "execd: %s\n", err.c_str());
    return 2;
  }
  if (cfg.show_help) fputs(execd::usage_text().c_str(), stdout);
  else if (cfg.show_help_markdown) fputs(execd::usage_markdown().c_str(), stdout);
  else if (cfg.show_version) printf("execd %s\n", EXECD_VERSION);
  else return std::nullopt;
  return 0;
}

// The hardening floor under every process execd starts, probed (the probe
// forks) while execd has no other thread; each layer asked for is logged.
void prepare_hardening(const execd::Config& cfg, execd::pty::Hardening& hardening) {
  execd::pty::HardeningOptions options;
  options.drop_caps = cfg.drop_caps;
  options.no_new_privs = cfg.no_new_privs;
  options.seccomp = cfg.seccomp;
  options.landlock = cfg.landlock;
  options.landlock_writable = cfg.landlock_writable;
  hardening.prepare(options);
  for (auto [name, layer] : {std::pair{"cap_drop", &hardening.caps_report}, std::pair{"no_new_privs", &hardening.nnp_report},
                             std::pair{"seccomp", &hardening.seccomp_report}, std::pair{"landlock", &hardening.landlock_report}})
    if (layer->state != execd::pty::LayerState::disabled)
      spdlog::info("hardening {}: {} ({})", name, execd::pty::layer_state_name(layer->state), layer->message);
}

// bash, else sh, from PATH; else /bin/sh.
std::string find_shell() {
  for (const char* name : {"bash", "sh"})
    if (std::string path = execd::pty::find_in_path(name); !path.empty()) return path;
  return "/bin/sh";
}

// The home of execd's own user (see Context::home).
std::string own_home() {
  execd::runners::UserIds self;
  execd::runners::lookup_user("", self);
  struct stat st {};
  return stat(self.home.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? self.home : "/";
}

// Uploads, downloads and tree walks each hold a pool thread while they
// touch the disk; libuv's default of 4 would let two slow transfers delay
// every command start. Must be set before the first uv_queue_work.
void size_libuv_threadpool() {
  setenv("UV_THREADPOOL_SIZE", std::to_string(execd::kPoolThreads).c_str(), 0);
}

// "HOST:PORT", "vsock:N" or both (the tests read the TCP port from the
// "listening on" line).
std::string listen_address(const execd::Config& cfg, int tcp_port) {
  std::string where = cfg.tcp ? cfg.host + ":" + std::to_string(tcp_port) : "";
  if (cfg.vsock_port) where += (where.empty() ? "vsock:" : " and vsock:") + std::to_string(cfg.vsock_port);
  return where;
}

// Says where the E2B listeners are and how they authenticate (without any
// token as loudly as --insecure-no-auth itself).
void log_e2b_listeners(execd::Daemon& daemon) {
  const execd::Config& cfg = daemon.ctx().config;
  bool open = cfg.insecure_no_auth && cfg.envd_access_token.empty();
  std::string auth = open                            ? " WITHOUT a token (--insecure-no-auth, loopback only)"
                     : cfg.envd_access_token.empty() ? " with execd's token"
                     : cfg.insecure_no_auth          ? " with the envd token"
                                                     : " with execd's token or the envd token";
  auto log = [&](const char* what, int port) {
    spdlog::log(open ? spdlog::level::warn : spdlog::level::info, "{} (E2B SDKs) listening on {}:{}{}", what,
                cfg.envd_host, port, auth);
  };
  if (cfg.envd_port >= 0) log("envd API", daemon.envd_port());
  if (cfg.code_interpreter_port >= 0) log("code-interpreter API", daemon.code_interpreter_port());
}

// Builds the daemon, listens, runs it until it stops; its exit status (1 if
// it cannot listen).
int serve(execd::Context ctx, execd::pty::ChildSetup& children, bool private_state_dir) {
  uv_loop_t* loop = uv_default_loop();
  int exit_status = 0;
  {
    execd::Daemon daemon(loop, std::move(ctx), children);
    const execd::Config& cfg = daemon.ctx().config;
    if (int rc = daemon.listen(); rc != 0) {
      fprintf(stderr, "execd: cannot listen on %s: %s\n", listen_address(cfg, cfg.port).c_str(), uv_strerror(rc));
      return 1;
    }
    spdlog::info("execd {} listening on {} (state dir {}, framing {}{})", EXECD_VERSION,
                 listen_address(cfg, daemon.bound_port()), cfg.state_dir, cfg.exact_framing ? "exact" : "compat",
                 cfg.init_mode ? ", init mode" : "");
    if (int rc = daemon.listen_e2b(); rc != 0) {
      fprintf(stderr, "execd: cannot listen for E2B's SDKs on %s: %s\n", cfg.envd_host.c_str(), uv_strerror(rc));
      return 1;
    }
    log_e2b_listeners(daemon);
    daemon.run();
    exit_status = daemon.exit_status();
    if (private_state_dir) execd::remove_private_state_dir(cfg.state_dir);
  }
  uv_loop_close(loop);
  return exit_status;
}

}  // namespace

int main(int argc, char** argv) {
  // An isolated session's holder re-executes execd as its init (pty/namespaces).
  if (execd::pty::is_holder_invocation(argc, argv)) execd::pty::holder_main(argc, argv);
  // A run's keeper (pty/keeper, containment without cgroups) is execd again.
  if (execd::pty::is_keeper_invocation(argc, argv)) execd::pty::keeper_main(argc, argv);
  // Before anything else: may start execd again (execd/malloc_tuning).
  execd::run_without_malloc_caches(argv);

  execd::Context ctx;
  if (std::optional<int> done = read_command_line(argc, argv, ctx.config)) return *done;
  execd::setup_logging(ctx.config);

  // What every child gets back of execd's own state: kept here, handed to
  // the daemon (no global).
  execd::pty::ChildSetup children;
  uint64_t open_files = children.raise_open_files_limit();
  spdlog::debug("open-files limit {}", open_files);
  execd::pty::Hardening hardening;
  prepare_hardening(ctx.config, hardening);
  children.set_hardening(&hardening);
  execd::pty::MountScope::remember_home();
  for (const std::string& w : ctx.config.warnings) spdlog::warn("{}", w);
  if (ctx.config.insecure_no_auth) spdlog::warn("running WITHOUT an access token (--insecure-no-auth)");

  ctx.base_env = execd::hide_secrets(argc, argv);
  if (const char* id = execd::env_lookup(ctx.base_env, "OPENSANDBOX_ID")) {
    std::string_view v = id;
    while (!v.empty() && isspace(static_cast<unsigned char>(v.front()))) v.remove_prefix(1);
    while (!v.empty() && isspace(static_cast<unsigned char>(v.back()))) v.remove_suffix(1);
    if (!v.empty()) ctx.static_metric_attrs.emplace_back("sandbox_id", std::string(v));
  }
  if (const char* extra = execd::env_lookup(ctx.base_env, "OPENSANDBOX_EXECD_METRICS_EXTRA_ATTRS"))
    for (auto& kv : execd::protocol::parse_metric_extra_attrs(extra)) ctx.static_metric_attrs.push_back(std::move(kv));
  ctx.shell = find_shell();
  ctx.home = own_home();
  bool private_state_dir = false;
  if (std::string err = execd::claim_state_dir(ctx.config, private_state_dir); !err.empty()) {
    fprintf(stderr, "execd: %s\n", err.c_str());
    return 1;
  }

  signal(SIGPIPE, SIG_IGN);  // a client hanging up must never kill execd
  size_libuv_threadpool();
  execd::tune_malloc_thresholds();
  int exit_status = serve(std::move(ctx), children, private_state_dir);
  spdlog::info("execd stopped");
  execd::power_off_if_machine_init();
  return exit_status;
}
