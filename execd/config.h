// execd/config: the command line, environment fallbacks and their validation.
// The flags themselves are rows of one table (execd/config_flags), which
// the parser, --help and --help-markdown (execd/config_usage) all read.
// Parsing never exits the process itself; main decides what to do.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace execd {

enum class LogFormat { text, json };

// Persistent across restarts and sandbox pause/resume (the root filesystem).
inline constexpr const char* kDefaultStateDir = "/var/lib/execd";

struct Config {
  std::string host = "0.0.0.0";
  int port = 44772;
  // --vsock-port: also listen on AF_VSOCK (any CID) on this port, as Kata
  // and Firecracker hosts reach a guest; 0 = no vsock listener. --no-tcp
  // leaves the TCP listener out (needs a vsock port).
  uint32_t vsock_port = 0;
  bool tcp = true;
  std::string access_token;  // empty only with insecure_no_auth
  bool insecure_no_auth = false;
  std::string log_level = "info";
  LogFormat log_format = LogFormat::text;
  std::string state_dir;          // default: kDefaultStateDir
  bool exact_framing = false;     // --framing exact
  int64_t graceful_shutdown_ms = 1000;
  int64_t retention_ms = 15 * 60 * 1000;  // finished command records and output
  int64_t cold_after_ms = 10 * 1000;      // a finished execution unused this long goes cold (exec/cold_records)
  int64_t log_limit_bytes = 64ll << 20;   // retained output per command
  int64_t state_budget_bytes = 1ll << 30;  // everything in the state dir (0: no absolute cap)
  int state_budget_percent = 25;           // ... and at most this share of its filesystem
  int state_floor_percent = 5;             // ... and never takes its filesystem's last N%
  int64_t code_spill_limit_bytes = 1ll << 30;  // /code output a slow client may lag behind by
  int64_t max_kernel_message_bytes = 1ll << 30;  // one message from a kernel, held whole to verify it
  int64_t max_body_bytes = 8ll << 20;     // buffered JSON bodies
  int64_t kill_grace_ms = 2000;           // TERM → KILL on timeout/interrupt
  int64_t idle_timeout_ms = 120 * 1000;   // silent client with no response in progress
  int64_t proxy_timeout_ms = 60 * 1000;   // /proxy: connect, response head, a stalled body either way
  int64_t proxy_idle_timeout_ms = 10 * 60 * 1000;  // /proxy: a tunnel (after a 101) silent both ways
  int64_t header_timeout_ms = 10 * 1000;  // first byte of a request head to its end
  int64_t body_timeout_ms = 60 * 1000;    // silence inside a request body
  int64_t max_connections = 16384;
  size_t max_records = 4096;              // finished records kept at most
  int64_t pty_replay_bytes = 1ll << 20;   // replay ring per PTY session
  bool init_mode = false;                 // PID-1 duties
  // --init -- CMD ARGS...: the entrypoint execd starts, supervises and
  // exits with (empty: none).
  std::vector<std::string> entrypoint;
  // --runtime-init: a warm-pool execd, unbound until POST /init.
  bool runtime_init = false;
  // --lifecycle-startup-status-file: bootstrap.sh's watchdog channel
  // (execd/lifecycle/status_file); empty: none.
  std::string lifecycle_status_file;
  bool state_dir_given = false;           // --state-dir on the command line
  bool journal = true;                    // --no-journal turns it off
  bool cgroups = true;                    // --no-cgroups: process groups only (pty/cgroup)
  std::string cgroup_parent;              // --cgroup-parent: where execd-<pid> goes (default: execd's own cgroup)
  int cgroup_spares = 2;                  // --cgroup-spares: spare cgroups with a launcher waiting in each (pty/launcher)
  int64_t journal_max_bytes = 16ll << 20; // rotate past this size
  int64_t stdin_timeout_ms = 30 * 1000;   // a stdin write blocked this long: 503
  // E2B's envd API (api/envd_*): a second listener, off unless a port is
  // given (-1 = off, 0 = any free port). Without an envd token it may only
  // listen on a loopback address (E2B's debug-mode SDKs send no token).
  int envd_port = -1;
  std::string envd_host;                  // default: 127.0.0.1 without a token, else --host
  std::string envd_access_token;          // X-Access-Token; empty: none (loopback only)
  std::string envd_access_token_source;   // as access_token_source; safe to log
  int code_interpreter_port = -1;         // E2B's code-interpreter server (49999); same host and token
  int64_t envd_max_processes = 1024;      // E2B processes running at once
  // Whom a SendSignal without `descendants` reaches: run = everything the
  // process started (execd's default, what kill() has always done here),
  // leader = the process alone, as envd. `descendants: true` always
  // reaches everything.
  enum class EnvdSignalScope : uint8_t { run, leader };
  EnvdSignalScope envd_signal_scope = EnvdSignalScope::run;
  int64_t envd_max_watchers = 128;        // directory watchers (WatchDir streams and polling watchers)
  int64_t envd_watcher_queue = 65536;     // events a polling watcher keeps between GetWatcherEvents
  int64_t envd_max_list_entries = 262144; // entries one ListDir answers (its depth can reach the whole disk)
  // File-change feeds (GET /files/watch) and track_changes (execd/watch).
  int64_t max_watches = 32;                 // watched roots at once (feeds and tracking share them)
  int64_t watch_ring_bytes = 1ll << 20;     // retained events per watch, for `since` resume
  int64_t watch_max_dirs = 16384;           // directories one recursive watch follows
  int64_t watch_retention_ms = 10 * 60 * 1000;  // a watch nobody reads is kept this long
  int64_t watch_coalesce_ms = 50;           // writes to one file within this are one event
  int64_t track_max_entries = 1000;         // paths listed per run with track_changes
  int64_t track_hash_max_bytes = 16ll << 20;  // files up to this size get a SHA-256
  // Directory archives (GET/POST /files/archive).
  int64_t archive_max_entries = 100000;     // entries one extraction may create
  int64_t archive_max_bytes = 4ll << 30;    // bytes one extraction may write
  // Pause cooperation (GET /activity, POST /freeze, /thaw).
  int64_t freeze_timeout_ms = 5000;         // POST /freeze gives up (and thaws) after this
  int64_t idle_after_ms = 60 * 1000;        // quiet this long (and nothing running): idle
  int64_t journal_event_max_bytes = 64 * 1024;  // one harness event (POST /journal/events)
  // What a client can make execd keep at once (execd/limits): 429 past it.
  size_t max_code_contexts = 32;
  size_t max_sessions = 64;               // bash sessions
  size_t max_ptys = 64;                   // PTY sessions
  size_t max_pty_viewers = 16;            // read-only viewers per PTY session
  size_t operation_capacity = 4096;       // caller-bound creation records (/command/operations, /pty/operations)
  size_t max_running = 4096;              // executions running (commands, session and code runs)
  size_t max_readers = 1024;              // resume readers and retried starts attached
  size_t max_journal_followers = 64;      // GET /journal?follow=true
  size_t max_tunnels = 1024;              // /proxy after a 101
  size_t max_isolated_sessions = 16;      // /v1/isolated sessions (each a set of namespaces and a shell)
  // Isolated sessions (/v1/isolated, execd/api/isolated): --no-isolation
  // turns them off; binds and extra_writable sources must lie beneath one
  // of the allowed paths (as upstream's allowed_writable).
  bool isolation = true;
  std::vector<std::string> isolated_allowed_paths = {"/workspace", "/mnt", "/media", "/data"};
  // How a session sees the host's root (pty/namespaces RootView): automatic
  // (ID-mapped where the kernel and file system allow it, else masked),
  // idmapped (or no isolation), masked. In --isolated-root-view's order.
  enum class RootViewChoice : uint8_t { automatic, idmapped, masked };
  RootViewChoice isolated_root_view = RootViewChoice::automatic;
  // Every file named as holding one of execd's tokens (flags and their
  // environment variables, read or not): isolated sessions never see them.
  std::vector<std::string> secret_files;
  // The hardening floor under every process execd starts (pty/hardening).
  bool drop_caps = false;
  bool no_new_privs = false;
  bool seccomp = false;
  bool landlock = false;
  std::vector<std::string> landlock_writable;  // empty: pty::kDefaultLandlockWritable
  bool show_help = false, show_help_markdown = false, show_version = false;

  // Where access_token came from: "--access-token", "--access-token-file",
  // "EXECD_ACCESS_TOKEN", "EXECD_ACCESS_TOKEN_FILE", or "" (none). Safe to log.
  std::string access_token_source;

  // Go execd flags accepted for compatibility and not acted on: execd runs
  // Jupyter kernels itself, there is no Jupyter server to point at. Each one
  // given (or its variable set) produces a warning. jupyter_token is a
  // secret: never log it.
  std::string jupyter_host;                    // --jupyter-host, env JUPYTER_HOST
  std::string jupyter_token;                   // --jupyter-token, env JUPYTER_TOKEN
  int64_t jupyter_idle_poll_interval_ms = 100; // --jupyter-idle-poll-interval, env EXECD_JUPYTER_IDLE_POLL_INTERVAL

  // One line each, for main to log (at warn) once logging is set up: flags
  // and environment variables that were accepted but are ignored, and flags
  // that were overridden. Never contains a token.
  std::vector<std::string> warnings;

  // Field by field (the tests compare what a flag changed).
  bool operator==(const Config&) const = default;
};

// Looks an environment variable up; returns nullptr when unset.
using EnvGetter = const char* (*)(const char*);

// Parses argv the way Go's flag package does, for execd's own flags and every
// flag of the Go execd 1.0.19:
//   -name=value  --name=value  -name value  --name value
//   bool flags: -name  -name=true|false (also 1/0/t/f/T/F/TRUE/FALSE/True/False);
//   a bool flag never takes the next argument as its value.
//   "--" ends the flags. Any other non-flag argument is an error (Go would
//   silently ignore it and everything after it, e.g. the "false" of
//   `-insecure-no-auth false`).
// Int values use Go's syntax (ParseInt base 0: 0x1F, 0o17, 017, 0b11, 1_000).
// Durations use Go's syntax (1h30m, 1.5s, 300ms, 10us, 0) and, as an execd
// extension, a bare number means milliseconds.
// Returns an empty string on success, else a one-line reason (main exits 2).
// Never reads a token file unless that source is the one selected, and never
// puts a token into a message or warning. `env` defaults to getenv.
std::string parse_config(int argc, char** argv, Config& cfg, EnvGetter env = nullptr);

// "1500", "1500ms", "2s", "1m", "1h", "1h30m", "1.5s", "250us" → milliseconds
// (sub-millisecond parts truncated); -1 if malformed or negative.
int64_t parse_duration_ms(const std::string& s);

// 127.x.y.z, ::1 or localhost.
bool is_loopback_address(const std::string& host);

// What --help prints: every flag of the table, grouped, with its default.
std::string usage_text();
// What --help-markdown prints: the same as a markdown reference, which
// docs/command-line.md holds (a test fails when the two differ).
std::string usage_markdown();

}  // namespace execd
