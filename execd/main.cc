// execd/main: start-up. Parses the command line, sets up logging, prepares
// the environment commands inherit and the process limits, then builds the
// Daemon (which owns everything else, shutdown included) and runs it.
#include <signal.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <sys/file.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "execd/api/work_gate.h"
#include "execd/config.h"
#include "execd/context.h"
#include "execd/daemon.h"
#include "execd/malloc_tuning.h"
#include "fs/small_file.h"
#include "execd/runners/command_spawn.h"
#include "protocol/json_text.h"
#include "pty/hardening.h"
#include "pty/namespaces.h"
#include "pty/spawn.h"

extern char** environ;

namespace {

// Variables that hold execd's own secrets never reach commands.
bool is_secret(const char* kv) {
  static const char* kSecrets[] = {"EXECD_ACCESS_TOKEN=", "EXECD_ACCESS_TOKEN_FILE=", "JUPYTER_TOKEN=",
                                   "EXECD_ENVD_ACCESS_TOKEN=", "EXECD_ENVD_ACCESS_TOKEN_FILE="};
  for (const char* s : kSecrets)
    if (strncmp(kv, s, strlen(s)) == 0) return true;
  return false;
}

// %j: the log message as a JSON string, so --log-format json stays one valid
// object per line whatever a message contains.
class JsonMessageFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    std::string s;
    execd::protocol::append_json_string_lossy(s, std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(s.data(), s.data() + s.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JsonMessageFlag>(); }
};

// /proc/<execd>/cmdline is world-readable and /proc/<execd>/environ readable
// by commands running as root: both show the process's original argument and
// environment memory, which unsetenv() does not touch. Overwrite the token
// there once it has been copied into the config.
void hide_secrets_from_proc(int argc, char** argv) {
  auto blank = [](char* p) {
    for (; *p; ++p) *p = 'x';
  };
  for (int i = 1; i < argc; ++i) {
    char* a = argv[i];
    const char* flags[] = {"--access-token", "-access-token", "--jupyter-token", "-jupyter-token",
                           "--envd-access-token", "-envd-access-token"};
    for (const char* f : flags) {
      size_t n = strlen(f);
      if (strncmp(a, f, n) != 0) continue;
      if (a[n] == '=') blank(a + n + 1);
      else if (a[n] == '\0' && i + 1 < argc) blank(argv[i + 1]);
    }
  }
  for (char** e = environ; *e; ++e)
    for (const char* secret : {"EXECD_ACCESS_TOKEN=", "JUPYTER_TOKEN=", "EXECD_ENVD_ACCESS_TOKEN="})
      if (strncmp(*e, secret, strlen(secret)) == 0) blank(*e + strlen(secret));
}

void setup_logging(const execd::Config& cfg) {
  auto logger = spdlog::stderr_logger_st("execd");
  spdlog::set_default_logger(logger);
  std::string level = cfg.log_level;
  if (!level.empty() && isdigit(static_cast<unsigned char>(level[0]))) {
    int n = std::stoi(level);  // the Go daemon's scale
    level = n <= 2 ? "critical" : n == 3 ? "error" : n == 4 ? "warn" : n <= 6 ? "info" : "debug";
  }
  spdlog::set_level(spdlog::level::from_str(level == "warning" ? "warn" : level));
  if (cfg.log_format == execd::LogFormat::json) {
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<JsonMessageFlag>('j').set_pattern(R"({"time":"%Y-%m-%dT%H:%M:%S.%f%z","level":"%l","msg":%j})");
    spdlog::set_formatter(std::move(formatter));
  } else
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %l %v");
}

bool make_dirs(const std::string& path) {
  std::string cur;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || (path[i] == '/' && i > 0)) {
      cur = path.substr(0, i);
      if (mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST) return false;
    }
  }
  return true;
}

// Holds an exclusive lock on <dir>/lock for the life of the process (the
// descriptor is close-on-exec: a command must not keep it after execd dies).
// A lock that is taken is tried again for a while: an execd killed a moment
// ago still holds it through its launchers (pty/launcher), which share its
// descriptor table and die by PR_SET_PDEATHSIG only after it has, so a
// supervisor's immediate restart would otherwise find the directory "in use"
// (or, without --state-dir, fall back to a directory that loses every record).
int lock_state_dir(const std::string& dir) {
  constexpr int kLockWaitMs = 3000, kLockRetryMs = 10;
  int fd = open((dir + "/lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  for (int waited = 0; flock(fd, LOCK_EX | LOCK_NB) != 0; waited += kLockRetryMs) {
    int e = errno;
    if (e != EWOULDBLOCK || waited >= kLockWaitMs) {
      close(fd);
      errno = e;
      return -1;
    }
    struct timespec pause = {0, kLockRetryMs * 1000000L};
    nanosleep(&pause, nullptr);
  }
  chmod(dir.c_str(), 0700);
  return fd;
}

void remove_dir_files(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) unlink((dir + "/" + e->d_name).c_str());
    closedir(d);
  }
  rmdir(dir.c_str());
}

// PID 1 of a whole (virtual) machine: the kernel panics when init exits, so
// execd powers the machine off instead. Only in the initial PID namespace:
// as PID 1 of a container, reboot() would end the container by SIGINT
// instead of the exit status 0 its runtime expects. Initial means both:
// /proc/self/status has a single NSpid (with a procfs of an outer namespace,
// as under `unshare --pid` without --mount-proc, it lists one per level),
// and PID 2 is the kernel's kthreadd (PF_KTHREAD; a container's own procfs
// has no kernel threads).
void power_off_if_machine_init() {
  if (getpid() != 1) return;
  std::optional<std::string> status = execd::fs::read_small_file("/proc/self/status", 1 << 16);
  if (!status) return;
  size_t at = status->find("\nNSpid:");
  if (at == std::string::npos) return;
  size_t end = status->find('\n', at + 1);
  std::string nspid = status->substr(at + 7, end == std::string::npos ? std::string::npos : end - at - 7);
  char one[8] = "";
  char extra[8] = "";
  if (sscanf(nspid.c_str(), " %7s %7s", one, extra) != 1 || strcmp(one, "1") != 0) return;
  std::optional<std::string> stat = execd::fs::read_small_file("/proc/2/stat", 4096);
  if (!stat) return;
  size_t paren = stat->rfind(')');
  if (paren == std::string::npos) return;
  unsigned long flags = 0;
  // After ") ": state ppid pgrp session tty_nr tpgid flags
  if (sscanf(stat->c_str() + paren + 1, " %*c %*d %*d %*d %*d %*d %lu", &flags) != 1) return;
  constexpr unsigned long kPfKthread = 0x00200000;
  if (!(flags & kPfKthread)) return;
  spdlog::info("execd was the machine's init: powering off");
  sync();
  reboot(RB_POWER_OFF);
  spdlog::error("power off failed: {}", strerror(errno));
}

}  // namespace

int main(int argc, char** argv) {
  // An isolated session's holder re-executes execd as its init (pty/namespaces).
  if (execd::pty::is_holder_invocation(argc, argv)) execd::pty::holder_main(argc, argv);
  // Before anything else: may start execd again (execd/malloc_tuning).
  execd::run_without_malloc_caches(argv);
  execd::Context ctx;
  std::string err = execd::parse_config(argc, argv, ctx.config);
  if (!err.empty()) {
    fprintf(stderr, "execd: %s\n", err.c_str());
    return 2;
  }
  if (ctx.config.show_help || ctx.config.show_help_markdown) {
    fputs((ctx.config.show_help ? execd::usage_text() : execd::usage_markdown()).c_str(), stdout);
    return 0;
  }
  if (ctx.config.show_version) {
    printf("execd %s\n", EXECD_VERSION);
    return 0;
  }
  setup_logging(ctx.config);
  // What every child gets back of execd's own state: kept by main, handed
  // to the daemon (no global).
  execd::pty::ChildSetup children;
  uint64_t open_files = children.raise_open_files_limit();
  spdlog::debug("open-files limit {}", open_files);
  // The hardening floor, probed while execd has no other thread (the probe forks).
  execd::pty::Hardening hardening;
  execd::pty::HardeningOptions harden;
  harden.drop_caps = ctx.config.drop_caps;
  harden.no_new_privs = ctx.config.no_new_privs;
  harden.seccomp = ctx.config.seccomp;
  harden.landlock = ctx.config.landlock;
  harden.landlock_writable = ctx.config.landlock_writable;
  hardening.prepare(harden);
  children.set_hardening(&hardening);
  for (auto [name, layer] : {std::pair{"cap_drop", &hardening.caps_report}, std::pair{"no_new_privs", &hardening.nnp_report},
                             std::pair{"seccomp", &hardening.seccomp_report}, std::pair{"landlock", &hardening.landlock_report}})
    if (layer->state != execd::pty::LayerState::disabled)
      spdlog::info("hardening {}: {} ({})", name, execd::pty::layer_state_name(layer->state), layer->message);
  execd::pty::MountScope::remember_home();
  for (const std::string& w : ctx.config.warnings) spdlog::warn("{}", w);
  if (ctx.config.insecure_no_auth) spdlog::warn("running WITHOUT an access token (--insecure-no-auth)");

  hide_secrets_from_proc(argc, argv);
  unsetenv("EXECD_ACCESS_TOKEN");
  unsetenv("EXECD_ACCESS_TOKEN_FILE");
  unsetenv("JUPYTER_TOKEN");
  unsetenv("EXECD_ENVD_ACCESS_TOKEN");
  unsetenv("EXECD_ENVD_ACCESS_TOKEN_FILE");
  for (char** e = environ; *e; ++e)
    if (!is_secret(*e)) ctx.base_env.emplace_back(*e);
  ctx.shell = execd::pty::find_in_path("bash");
  if (ctx.shell.empty()) ctx.shell = execd::pty::find_in_path("sh");
  if (ctx.shell.empty()) ctx.shell = "/bin/sh";
  {
    execd::runners::UserIds self;
    execd::runners::lookup_user("", self);
    struct stat st {};
    ctx.home = stat(self.home.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? self.home : "/";
  }

  // The state dir belongs to one execd at a time (a second one would take
  // the first one's running commands for lost ones): a lock file says whose.
  // Without --state-dir, a default that cannot be created or is taken falls
  // back to a private directory that goes away with this process.
  bool ephemeral_state = false;
  if (ctx.config.state_dir.empty()) {
    ctx.config.state_dir = execd::kDefaultStateDir;
    if (!make_dirs(ctx.config.state_dir) || lock_state_dir(ctx.config.state_dir) < 0) {
      const char* tmp = getenv("TMPDIR");
      std::string fallback = std::string(tmp && *tmp ? tmp : "/tmp") + "/execd-" + std::to_string(getpid());
      spdlog::warn("state dir {} unusable ({}): records and the journal go to {} and do not survive a restart",
                   ctx.config.state_dir, strerror(errno), fallback);
      ctx.config.state_dir = fallback;
      ephemeral_state = true;
    }
  }
  if (ephemeral_state || ctx.config.state_dir_given) {
    if (!make_dirs(ctx.config.state_dir)) {
      fprintf(stderr, "execd: cannot create --state-dir %s: %s\n", ctx.config.state_dir.c_str(), strerror(errno));
      return 1;
    }
    if (lock_state_dir(ctx.config.state_dir) < 0) {
      fprintf(stderr, "execd: --state-dir %s: %s\n", ctx.config.state_dir.c_str(),
              errno == EWOULDBLOCK ? "in use by another execd" : strerror(errno));
      return 1;
    }
  }

  // A client hanging up must never kill execd.
  signal(SIGPIPE, SIG_IGN);

  // Uploads, downloads and tree walks each hold a pool thread while they
  // touch the disk; libuv's default of 4 would let two slow transfers delay
  // every command start. Must be set before the first uv_queue_work.
  setenv("UV_THREADPOOL_SIZE", std::to_string(execd::api::kPoolThreads).c_str(), 0);
  // glibc gives each thread that allocates its own arena (16 KiB resident
  // each once used): the pool threads, which allocate little, share one
  // besides the loop's, so a warm pool costs ~16 KiB, not ~240.
  mallopt(M_ARENA_MAX, 2);
  // A fixed mmap threshold: anything of 2 MiB or more (a kernel's large
  // print as it arrives from the kernel, a burst's buffers) goes back to the
  // system when freed. glibc's default raises the threshold after each such
  // free, and the next large buffers then stayed resident for good (256 MiB
  // ten seconds after one 128 MiB print). Streaming buffers (up to ~0.5 MiB)
  // stay below it.
  mallopt(M_MMAP_THRESHOLD, 2 << 20);
  // Setting the threshold also fixes the trim threshold at its 128 KiB
  // default: every free at the top of the heap gave pages back, and a
  // stream's buffers (the output log's, about 1.5 MiB) were faulted in again
  // for each write (clear_page and page faults were ~10% of execd's CPU per
  // streamed byte). The daemon's tick trims on its own terms (when quiet, or
  // when much lies free), so the heap may keep a few MiB between ticks.
  mallopt(M_TRIM_THRESHOLD, 8 << 20);

  uv_loop_t* loop = uv_default_loop();
  int exit_status = 0;
  {
    execd::Daemon daemon(loop, std::move(ctx), children);
    int rc = daemon.listen();
    const execd::Config& cfg = daemon.ctx().config;
    // "HOST:PORT", "vsock:N" or both (the tests read the TCP port from this line).
    auto where = [&](int tcp_port) {
      std::string w = cfg.tcp ? cfg.host + ":" + std::to_string(tcp_port) : "";
      if (cfg.vsock_port) w += (w.empty() ? "vsock:" : " and vsock:") + std::to_string(cfg.vsock_port);
      return w;
    };
    if (rc != 0) {
      fprintf(stderr, "execd: cannot listen on %s: %s\n", where(cfg.port).c_str(), uv_strerror(rc));
      return 1;
    }
    spdlog::info("execd {} listening on {} (state dir {}, framing {}{})", EXECD_VERSION, where(daemon.bound_port()), cfg.state_dir,
                 cfg.exact_framing ? "exact" : "compat", cfg.init_mode ? ", init mode" : "");
    if ((rc = daemon.listen_e2b()) != 0) {
      fprintf(stderr, "execd: cannot listen for E2B's SDKs on %s: %s\n", cfg.envd_host.c_str(), uv_strerror(rc));
      return 1;
    }
    // What the E2B listeners take; without any token, said as loudly as
    // --insecure-no-auth itself.
    std::string e2b_auth = cfg.insecure_no_auth && cfg.envd_access_token.empty()
                               ? " WITHOUT a token (--insecure-no-auth, loopback only)"
                           : cfg.envd_access_token.empty() ? " with execd's token"
                           : cfg.insecure_no_auth          ? " with the envd token"
                                                           : " with execd's token or the envd token";
    auto log_e2b = [&](const char* what, int port) {
      if (cfg.insecure_no_auth && cfg.envd_access_token.empty())
        spdlog::warn("{} (E2B SDKs) listening on {}:{}{}", what, cfg.envd_host, port, e2b_auth);
      else
        spdlog::info("{} (E2B SDKs) listening on {}:{}{}", what, cfg.envd_host, port, e2b_auth);
    };
    if (cfg.envd_port >= 0) log_e2b("envd API", daemon.envd_port());
    if (cfg.code_interpreter_port >= 0) log_e2b("code-interpreter API", daemon.code_interpreter_port());
    daemon.run();
    exit_status = daemon.exit_status();
    if (ephemeral_state) remove_dir_files(cfg.state_dir);
  }
  uv_loop_close(loop);
  spdlog::info("execd stopped");
  power_off_if_machine_init();
  return exit_status;
}
