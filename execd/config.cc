// execd/config: see header.
#include "execd/config.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string_view>
#include <tuple>

#include "fs/small_file.h"
#include "protocol/go_syntax.h"

namespace execd {

const char* const kUsage =
    "usage: execd [options]      (flags as in Go: -name value, --name=value, ...)\n"
    "  --host ADDR                     listen address (default 0.0.0.0)\n"
    "  --port N                        listen port (default 44772)\n"
    "  --vsock-port N                  also listen on AF_VSOCK port N (any CID; same routes and token)\n"
    "  --no-tcp                        no TCP listener: vsock only (needs --vsock-port)\n"
    "  --access-token TOKEN            required X-EXECD-ACCESS-TOKEN value\n"
    "  --access-token-file PATH        read the token from a file (trailing whitespace ignored)\n"
    "                                  first found wins: --access-token, --access-token-file,\n"
    "                                  env EXECD_ACCESS_TOKEN, env EXECD_ACCESS_TOKEN_FILE (a path)\n"
    "  --insecure-no-auth              run without a token (logs a warning); the E2B listeners too\n"
    "                                  unless they have an envd token\n"
    "  --log-level LEVEL               trace|debug|info|warn|error|off, or Go's 0-7 (default info)\n"
    "  --log-format text|json          log line format (default text)\n"
    "  --state-dir DIR                 command records, retained output and the journal\n"
    "                                  (default /var/lib/execd, created 0700; kept across restarts)\n"
    "  --journal-max-bytes BYTES       rotate the execution journal past this size; one rotated\n"
    "                                  file is kept (default 16777216)\n"
    "  --no-journal                    do not keep the execution journal\n"
    "  --stdin-timeout D               a stdin write waits this long for a command that does not\n"
    "                                  read before answering 503 (default 30s)\n"
    "  --framing compat|exact          stream framing for every request (default compat;\n"
    "                                  a request may ask for exact with Accept: application/x-ndjson)\n"
    "  --graceful-shutdown-timeout D   drain time on SIGTERM (default 1s; env EXECD_API_GRACE_SHUTDOWN)\n"
    "  --retention D                   keep finished commands and their output (default 15m)\n"
    "  --max-records N                 keep at most N finished ones, oldest go first (default 4096)\n"
    "  --cold-after D                  keep a finished one unused this long as it is, then only its\n"
    "                                  packed record (default 10s; at once while no client is connected)\n"
    "  --log-limit BYTES               retained output per command (default 67108864)\n"
    "  --code-spill-limit BYTES        /code output kept on disk for a slow client before its stream\n"
    "                                  ends with OutputOverflow (default 1073741824; 0 = none)\n"
    "  --max-kernel-message BYTES      largest message taken from a kernel; a larger one is skipped\n"
    "                                  and the run told so on stderr (default 1073741824)\n"
    "  --max-body BYTES                largest JSON request body (default 8388608)\n"
    "  --pty-replay-bytes BYTES        replay buffer per PTY session (default 1048576)\n"
    "  --kill-grace D                  TERM to KILL delay on timeout/interrupt (default 2s)\n"
    "  --idle-timeout D                close connections silent this long between requests (default 2m)\n"
    "  --proxy-timeout D               /proxy/{port}: 504 when the service sends no response head\n"
    "                                  this long after the request, or a body stops moving either\n"
    "                                  way for this long (default 60s)\n"
    "  --proxy-idle-timeout D          /proxy/{port}: close a tunnel (after a 101) silent both ways\n"
    "                                  this long (default 10m)\n"
    "  --header-timeout D              a request head must arrive within this from its first byte (default 10s)\n"
    "  --body-timeout D                longest silence inside a request body (default 60s)\n"
    "  --max-connections N             connections held at once; idle and unauthenticated ones are shed first\n"
    "                                  (default 16384, and never more than the open-files limit allows)\n"
    "  --max-code-contexts N           code contexts (kernels) at once, both APIs (default 32)\n"
    "  --max-sessions N                bash sessions at once (default 64)\n"
    "  --max-ptys N                    PTY sessions at once (default 64)\n"
    "  --max-pty-viewers N             read-only viewers per PTY session (default 16)\n"
    "  --max-running N                 executions running at once: commands, session runs, code runs\n"
    "                                  (default 4096)\n"
    "  --max-readers N                 resume readers and retried starts streaming at once (default 1024)\n"
    "  --max-journal-followers N       GET /journal?follow=true at once (default 64)\n"
    "  --max-tunnels N                 /proxy tunnels (after a 101) at once (default 1024)\n"
    "  --no-cgroups                    no per-command cgroups: commands are process groups only\n"
    "                                  (no limits, no containment of setsid children)\n"
    "  --cgroup-parent PATH            cgroup (as in /proc/self/cgroup) under which execd-<pid>/cmd-<n>\n"
    "                                  are made (default: execd's own cgroup)\n"
    "  --cgroup-spares N               spare cgroups made ahead, each with a launcher process waiting in\n"
    "                                  it to become the next command, so a start writes no cgroup.procs\n"
    "                                  (cgroup v1; default 2; 0 = commands join theirs as they start)\n"
    "  --envd-port N                   also speak E2B's envd API (Connect over HTTP/1.1) on this port\n"
    "                                  (off by default; E2B uses 49983; 0 = any free port)\n"
    "  --code-interpreter-port N       E2B's code-interpreter API (/execute, /contexts) on this port too\n"
    "                                  (off by default; E2B uses 49999); also served on --envd-port\n"
    "                                  (env EXECD_ENVD_PORT, EXECD_CODE_INTERPRETER_PORT; a flag wins)\n"
    "  --envd-host ADDR                address of the E2B listeners (default --host; 127.0.0.1, and\n"
    "                                  only loopback, when they take no token)\n"
    "  --envd-access-token TOKEN       a token the E2B listeners take besides execd's (X-Access-Token)\n"
    "  --envd-access-token-file PATH   read it from a file; env EXECD_ENVD_ACCESS_TOKEN, EXECD_ENVD_ACCESS_TOKEN_FILE\n"
    "  --envd-max-processes N          E2B processes running at once (default 1024)\n"
    "  --envd-max-watchers N           E2B directory watchers at once (default 128)\n"
    "  --envd-watcher-queue N          events a polling watcher keeps between reads (default 65536)\n"
    "  --envd-max-list-entries N       entries one ListDir may answer (default 262144)\n"
    "  --init [-- CMD ARGS...]         PID-1 duties: reap orphans; with CMD, start it (stdio inherited),\n"
    "                                  forward TERM/INT/HUP/USR1/USR2/WINCH to it and exit with its status\n"
    "                                  (env EXECD_INIT=1 turns --init on)\n"
    "  --runtime-init                  warm pool: only /ping, /ready and /init answer until POST /init binds\n"
    "                                  this execd (a token is then optional: /init brings its hash)\n"
    "  --max-watches N                 watched roots at once, feeds and track_changes (default 32)\n"
    "  --watch-ring-bytes BYTES        events kept per watch for ?since= resume (default 1048576)\n"
    "  --watch-max-dirs N              directories one recursive watch follows (default 16384)\n"
    "  --watch-retention D             keep a watch nobody reads this long (default 10m)\n"
    "  --watch-coalesce D              writes to one file within this are one event (default 50ms)\n"
    "  --track-max-entries N           paths listed per run with track_changes (default 1000)\n"
    "  --track-hash-max-bytes BYTES    changed files up to this size get a SHA-256 (default 16777216)\n"
    "  --archive-max-entries N         entries one archive extraction may create (default 100000)\n"
    "  --archive-max-bytes BYTES       bytes one archive extraction, or one gzip upload, may write (default 4294967296)\n"
    "  --freeze-timeout D              POST /freeze gives up and thaws after this (default 5s)\n"
    "  --idle-after D                  GET /activity says idle after this long quiet (default 1m)\n"
    "  --journal-event-max-bytes BYTES one event of POST /journal/events (default 65536)\n"
    "  --max-isolated-sessions N       isolated sessions (/v1/isolated) at once (default 16)\n"
    "  --no-isolation                  no isolated sessions: /v1/isolated/capabilities says so\n"
    "  --isolated-allowed-paths LIST   binds and extra_writable of isolated sessions must lie beneath\n"
    "                                  one of these (':'-separated; default /workspace:/mnt:/media:/data)\n"
    "  --drop-caps                     hardening: every process execd starts keeps only Docker's\n"
    "                                  default capabilities\n"
    "  --no-new-privs                  hardening: no_new_privs on every process (setuid binaries and\n"
    "                                  file capabilities grant nothing)\n"
    "  --seccomp                       hardening: execd's syscall deny-list on every process\n"
    "                                  (implies --no-new-privs; see the README for the list)\n"
    "  --landlock                      hardening: every process may write only beneath\n"
    "                                  --landlock-writable (implies --no-new-privs)\n"
    "  --landlock-writable LIST        ':'-separated (default /tmp:/var/tmp:/dev:/proc:/run:/workspace:\n"
    "                                  /home:/root)\n"
    "  --jupyter-host URL, --jupyter-token TOKEN, --jupyter-idle-poll-interval D\n"
    "                                  accepted for compatibility with the Go execd (env JUPYTER_HOST,\n"
    "                                  JUPYTER_TOKEN, EXECD_JUPYTER_IDLE_POLL_INTERVAL); ignored:\n"
    "                                  execd runs kernels itself, no Jupyter server (see /code)\n"
    "  --help, --version\n"
    "Durations: Go syntax (1h30m, 1.5s, 300ms, 250us) or a bare number of milliseconds.\n";

namespace {

// Go's time.ParseDuration, in nanoseconds (as a double: the values here are
// far below 2^53 ns ≈ 104 days of precision loss). Plus execd's extension: a
// bare unsigned number is milliseconds.
bool parse_go_duration_ns(std::string_view s, double& out_ns) {
  bool negative = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.empty()) return false;
  if (s == "0") {
    out_ns = 0;
    return true;
  }
  // Extension: "1500" or "1.5" = milliseconds.
  if (s.find_first_not_of("0123456789.") == std::string_view::npos) {
    char* end = nullptr;
    std::string copy(s);
    errno = 0;
    double v = std::strtod(copy.c_str(), &end);
    if (errno || *end || copy.front() == '.' || copy.back() == '.' || copy.find('.') != copy.rfind('.'))
      return false;
    out_ns = (negative ? -v : v) * 1e6;
    return true;
  }
  double total = 0;
  while (!s.empty()) {
    size_t i = 0;
    bool digits = false;
    double whole = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') whole = whole * 10 + (s[i++] - '0'), digits = true;
    double frac = 0, scale = 1;
    if (i < s.size() && s[i] == '.') {
      ++i;
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
        scale /= 10;
        frac += (s[i++] - '0') * scale;
        digits = true;
      }
    }
    if (!digits) return false;
    s.remove_prefix(i);
    static constexpr struct {
      std::string_view name;
      double ns;
    } kUnits[] = {{"ns", 1},        {"us", 1e3},       {"\xC2\xB5s", 1e3}, {"\xCE\xBCs", 1e3},
                  {"ms", 1e6},      {"s", 1e9},        {"m", 60e9},        {"h", 3600e9}};
    double unit = 0;
    size_t unit_len = 0;
    for (const auto& u : kUnits) {
      if (s.substr(0, u.name.size()) == u.name && u.name.size() > unit_len) {
        unit = u.ns;
        unit_len = u.name.size();
      }
    }
    if (unit_len == 0) return false;  // Go: "missing unit in duration" / "unknown unit"
    s.remove_prefix(unit_len);
    total += (whole + frac) * unit;
  }
  if (total > 9.3e18) return false;  // Go: "invalid duration" (int64 ns overflow)
  out_ns = negative ? -total : total;
  return true;
}

bool parse_int(const std::string& s, int64_t lo, int64_t hi, int64_t& out) {
  int64_t v;
  if (!protocol::parse_go_int(s, 0, v) || v < lo || v > hi) return false;
  out = v;
  return true;
}

// Normalizes a log level: names stay; Go's integers (any int, e.g. -1 or
// 0x7) become "0".."7" (Go: <=2 fatal, 3 error, 4 warn, 5-6 info, >=7 debug).
bool normalize_log_level(std::string& l) {
  static const char* kLevels[] = {"trace", "debug", "info", "warn", "warning", "error", "critical", "off"};
  for (auto* k : kLevels)
    if (l == k) return true;
  int64_t n;
  if (!protocol::parse_go_int(l, 0, n)) return false;
  l = std::to_string(n < 0 ? 0 : n > 7 ? 7 : n);
  return true;
}

enum class TokenFileError { none, unreadable, empty };

TokenFileError read_token_file(const std::string& path, std::string& token) {
  std::optional<std::string> text = fs::read_small_file(path, 1 << 20);
  if (!text) return TokenFileError::unreadable;
  std::string t = std::move(*text);
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ' || t.back() == '\t')) t.pop_back();
  if (t.empty()) return TokenFileError::empty;
  token = std::move(t);
  return TokenFileError::none;
}

const char* system_getenv(const char* name) { return std::getenv(name); }

// "a:b:c" -> absolute, non-empty paths; false if any is not.
bool parse_path_list(const std::string& value, std::vector<std::string>& out) {
  out.clear();
  size_t start = 0;
  while (start <= value.size()) {
    size_t colon = value.find(':', start);
    std::string p = value.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (p.empty() || p[0] != '/') return false;
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    out.push_back(p);
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return !out.empty();
}

}  // namespace

bool is_loopback_address(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  // 127.0.0.0/8, written as a dotted quad.
  if (host.rfind("127.", 0) != 0) return false;
  int dots = 0;
  for (char c : host) {
    if (c == '.') ++dots;
    else if (c < '0' || c > '9') return false;
  }
  return dots == 3;
}

int64_t parse_duration_ms(const std::string& s) {
  double ns;
  if (!parse_go_duration_ns(s, ns) || ns < 0) return -1;
  return static_cast<int64_t>(ns / 1e6);
}

std::string parse_config(int argc, char** argv, Config& cfg, EnvGetter env) {
  if (!env) env = system_getenv;
  auto getenv_nonempty = [&](const char* name) -> const char* {
    const char* v = env(name);
    return v && *v ? v : nullptr;
  };
  std::string token_flag_value, token_file;
  std::string envd_token_flag_value, envd_token_file;
  bool envd_token_flag = false, envd_token_file_flag = false, envd_host_flag = false;
  bool envd_port_flag = false, code_interpreter_port_flag = false;
  bool token_flag = false, token_file_flag = false, grace_flag = false;
  bool jupyter_host_flag = false, jupyter_token_flag = false, jupyter_poll_flag = false;

  for (int i = 1; i < argc; ++i) {
    std::string raw = argv[i];
    if (raw == "--") {
      for (int j = i + 1; j < argc; ++j) cfg.entrypoint.emplace_back(argv[j]);
      break;
    }
    // Go: one or two dashes, then a name that starts with neither '-' nor '='.
    std::string arg;
    if (raw.rfind("--", 0) == 0) arg = raw.substr(2);
    else if (raw.rfind("-", 0) == 0 && raw.size() > 1) arg = raw.substr(1);
    else return "unexpected argument: " + raw;
    if (arg.empty() || arg[0] == '-' || arg[0] == '=') return "bad flag syntax: " + raw;
    std::string name = arg, value;
    bool has_value = false;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    // Non-bool flags: the value is after '=' or the next argument, whatever it looks like.
    auto need_value = [&]() -> bool {
      if (has_value) return true;
      if (i + 1 >= argc) return false;
      value = argv[++i];
      return true;
    };
    // Bool flags: bare, or =true/=false; never the next argument.
    bool flag_value = true;
    auto bool_value = [&]() -> bool { return !has_value || protocol::parse_go_bool(value, flag_value); };
    auto bad_bool = [&]() { return "invalid boolean value \"" + value + "\" for flag -" + name; };

    if (name == "help" || name == "h") {
      cfg.show_help = true;  // Go prints the usage for -h/-help whatever the value
    } else if (name == "version") {
      if (!bool_value()) return bad_bool();
      cfg.show_version = flag_value;
    } else if (name == "insecure-no-auth") {
      if (!bool_value()) return bad_bool();
      cfg.insecure_no_auth = flag_value;
    } else if (name == "no-journal") {
      if (!bool_value()) return bad_bool();
      cfg.journal = !flag_value;
    } else if (name == "no-cgroups") {
      if (!bool_value()) return bad_bool();
      cfg.cgroups = !flag_value;
    } else if (name == "cgroup-parent") {
      if (!need_value() || value.empty() || value[0] != '/' || value.find("..") != std::string::npos)
        return "--cgroup-parent needs an absolute cgroup path like /execd";
      cfg.cgroup_parent = value;
    } else if (name == "max-records") {
      int64_t n;
      if (!need_value() || !parse_int(value, 1, 1 << 20, n)) return "--max-records needs a count from 1 to 1048576";
      cfg.max_records = static_cast<size_t>(n);
    } else if (name == "cgroup-spares") {
      int64_t n;
      if (!need_value() || !parse_int(value, 0, 64, n)) return "--cgroup-spares needs a count from 0 to 64";
      cfg.cgroup_spares = static_cast<int>(n);
    } else if (name == "journal-max-bytes") {
      int64_t n;
      if (!need_value() || !parse_int(value, 4096, int64_t(1) << 40, n))
        return "--journal-max-bytes needs a byte count >= 4096";
      cfg.journal_max_bytes = n;
    } else if (name == "stdin-timeout") {
      int64_t ms;
      if (!need_value() || (ms = parse_duration_ms(value)) < 0) return "--stdin-timeout needs a duration like 500ms or 30s";
      cfg.stdin_timeout_ms = ms;
    } else if (name == "no-isolation" || name == "drop-caps" || name == "no-new-privs" || name == "seccomp" ||
               name == "landlock") {
      if (!bool_value()) return bad_bool();
      bool& slot = name == "drop-caps" ? cfg.drop_caps
                   : name == "no-new-privs" ? cfg.no_new_privs
                   : name == "seccomp" ? cfg.seccomp
                   : name == "landlock" ? cfg.landlock
                                        : cfg.isolation;
      slot = name == "no-isolation" ? !flag_value : flag_value;
    } else if (name == "landlock-writable" || name == "isolated-allowed-paths") {
      std::vector<std::string> paths;
      if (!need_value() || !parse_path_list(value, paths))
        return "--" + name + " needs absolute paths separated by ':'";
      (name == "landlock-writable" ? cfg.landlock_writable : cfg.isolated_allowed_paths) = std::move(paths);
    } else if (name == "isolation-config") {
      // The Go daemon's TOML file (upper dir, allowed_writable, [hardening],
      // [landlock], [seccomp]): accepted, not read.
      if (!need_value()) return "--isolation-config needs a path";
      cfg.warnings.push_back("--isolation-config accepted but ignored: execd takes --isolated-allowed-paths, "
                             "--drop-caps, --no-new-privs, --seccomp and --landlock instead");
    } else if (name == "init") {
      if (!bool_value()) return bad_bool();
      cfg.init_mode = flag_value;
    } else if (name == "runtime-init") {
      if (!bool_value()) return bad_bool();
      cfg.runtime_init = flag_value;
    } else if (name == "host") {
      if (!need_value() || value.empty()) return "--host needs an address";
      cfg.host = value;
    } else if (name == "port") {
      int64_t p;
      if (!need_value() || !parse_int(value, 0, 65535, p)) return "--port needs a number between 0 and 65535 (0 = any free port)";
      cfg.port = static_cast<int>(p);
    } else if (name == "vsock-port") {
      int64_t p;
      // 32-bit ports; 0xFFFFFFFF is VMADDR_PORT_ANY, not a port to listen on.
      if (!need_value() || !parse_int(value, 1, 0xFFFFFFFEll, p)) return "--vsock-port needs a number between 1 and 4294967294";
      cfg.vsock_port = static_cast<uint32_t>(p);
    } else if (name == "no-tcp") {
      if (!bool_value()) return bad_bool();
      cfg.tcp = !flag_value;
    } else if (name == "envd-port" || name == "code-interpreter-port") {
      int64_t p;
      if (!need_value() || !parse_int(value, 0, 65535, p))
        return "--" + name + " needs a number between 0 and 65535 (0 = any free port)";
      (name == "envd-port" ? cfg.envd_port : cfg.code_interpreter_port) = static_cast<int>(p);
      (name == "envd-port" ? envd_port_flag : code_interpreter_port_flag) = true;
    } else if (name == "envd-host") {
      if (!need_value() || value.empty()) return "--envd-host needs an address";
      cfg.envd_host = value;
      envd_host_flag = true;
    } else if (name == "envd-access-token") {
      if (!need_value() || value.empty()) return "--envd-access-token needs a non-empty value";
      envd_token_flag_value = value;
      envd_token_flag = true;
    } else if (name == "envd-access-token-file") {
      if (!need_value() || value.empty()) return "--envd-access-token-file needs a path";
      envd_token_file = value;
      envd_token_file_flag = true;
    } else if (name == "envd-max-processes" || name == "envd-max-watchers" || name == "envd-watcher-queue" ||
               name == "envd-max-list-entries") {
      int64_t n;
      if (!need_value() || !parse_int(value, 1, 1 << 24, n)) return "--" + name + " needs a count >= 1";
      (name == "envd-max-processes"   ? cfg.envd_max_processes
       : name == "envd-max-watchers"  ? cfg.envd_max_watchers
       : name == "envd-watcher-queue" ? cfg.envd_watcher_queue
                                      : cfg.envd_max_list_entries) = n;
    } else if (name == "access-token") {
      if (!need_value() || value.empty()) return "--access-token needs a non-empty value";
      token_flag_value = value;
      token_flag = true;
    } else if (name == "access-token-file") {
      if (!need_value() || value.empty()) return "--access-token-file needs a path";
      token_file = value;
      token_file_flag = true;
    } else if (name == "log-level") {
      if (!need_value() || !normalize_log_level(value)) return "--log-level must be trace|debug|info|warn|error|off or 0-7";
      cfg.log_level = value;
    } else if (name == "log-format") {
      if (!need_value() || (value != "text" && value != "json")) return "--log-format must be text or json";
      cfg.log_format = value == "json" ? LogFormat::json : LogFormat::text;
    } else if (name == "state-dir") {
      if (!need_value() || value.empty()) return "--state-dir needs a directory";
      cfg.state_dir = value;
      cfg.state_dir_given = true;
    } else if (name == "framing") {
      if (!need_value() || (value != "compat" && value != "exact")) return "--framing must be compat or exact";
      cfg.exact_framing = value == "exact";
    } else if (name == "graceful-shutdown-timeout") {
      double ns;
      if (!need_value() || !parse_go_duration_ns(value, ns))
        return "--graceful-shutdown-timeout needs a duration like 1500ms, 2s or 1m";
      cfg.graceful_shutdown_ms = ns <= 0 ? 0 : static_cast<int64_t>(ns / 1e6);  // Go: negative = no drain
      grace_flag = true;
    } else if (name == "proxy-timeout" || name == "proxy-idle-timeout") {
      int64_t ms;
      if (!need_value() || (ms = parse_duration_ms(value)) <= 0)
        return "--" + name + " needs a positive duration like 500ms, 30s or 2m";
      (name == "proxy-timeout" ? cfg.proxy_timeout_ms : cfg.proxy_idle_timeout_ms) = ms;
    } else if (name == "cold-after") {
      int64_t ms;
      if (!need_value() || (ms = parse_duration_ms(value)) < 0)
        return "--cold-after needs a duration like 0s, 10s or 1m";
      cfg.cold_after_ms = ms;
    } else if (name == "retention" || name == "kill-grace" || name == "idle-timeout") {
      int64_t ms;
      if (!need_value() || (ms = parse_duration_ms(value)) < 0)
        return "--" + name + " needs a duration like 1500ms, 2s or 1m";
      (name == "retention" ? cfg.retention_ms : name == "kill-grace" ? cfg.kill_grace_ms : cfg.idle_timeout_ms) = ms;
    } else if (name == "header-timeout" || name == "body-timeout") {
      int64_t ms;
      if (!need_value() || (ms = parse_duration_ms(value)) < 0)
        return "--" + name + " needs a duration like 1500ms, 2s or 1m";
      (name == "header-timeout" ? cfg.header_timeout_ms : cfg.body_timeout_ms) = ms;
    } else if (name == "max-code-contexts" || name == "max-sessions" || name == "max-ptys" ||
               name == "max-pty-viewers" || name == "max-running" || name == "max-readers" || name == "max-journal-followers" ||
               name == "max-tunnels" || name == "max-isolated-sessions") {
      int64_t n;
      if (!need_value() || !parse_int(value, 1, 1 << 24, n)) return "--" + name + " needs a count >= 1";
      size_t& slot = name == "max-code-contexts" ? cfg.max_code_contexts
                     : name == "max-sessions"    ? cfg.max_sessions
                     : name == "max-ptys"        ? cfg.max_ptys
                     : name == "max-pty-viewers" ? cfg.max_pty_viewers
                     : name == "max-running"     ? cfg.max_running
                     : name == "max-readers"     ? cfg.max_readers
                     : name == "max-journal-followers" ? cfg.max_journal_followers
                     : name == "max-isolated-sessions" ? cfg.max_isolated_sessions
                                                       : cfg.max_tunnels;
      slot = static_cast<size_t>(n);
    } else if (name == "max-connections") {
      int64_t n;
      if (!need_value() || !parse_int(value, 1, 1 << 24, n)) return "--max-connections needs a count >= 1";
      cfg.max_connections = n;
    } else if (name == "code-spill-limit") {
      int64_t n;
      if (!need_value() || !parse_int(value, 0, int64_t(1) << 50, n)) return "--code-spill-limit needs a byte count";
      cfg.code_spill_limit_bytes = n;
    } else if (name == "max-kernel-message") {
      int64_t n;
      if (!need_value() || !parse_int(value, 4096, int64_t(1) << 40, n))
        return "--max-kernel-message needs a byte count >= 4096";
      cfg.max_kernel_message_bytes = n;
    } else if (name == "log-limit" || name == "max-body") {
      int64_t n;
      if (!need_value() || !parse_int(value, 0, int64_t(1) << 50, n)) return "--" + name + " needs a byte count";
      (name == "log-limit" ? cfg.log_limit_bytes : cfg.max_body_bytes) = n;
    } else if (name == "pty-replay-bytes") {
      int64_t n;
      if (!need_value() || !parse_int(value, 1, int64_t(1) << 40, n)) return "--pty-replay-bytes needs a byte count >= 1";
      cfg.pty_replay_bytes = n;
    } else if (name == "max-watches" || name == "watch-max-dirs" || name == "track-max-entries" ||
               name == "archive-max-entries") {
      int64_t n;
      if (!need_value() || !parse_int(value, 1, int64_t(1) << 30, n)) return "--" + name + " needs a count >= 1";
      (name == "max-watches"         ? cfg.max_watches
       : name == "watch-max-dirs"    ? cfg.watch_max_dirs
       : name == "track-max-entries" ? cfg.track_max_entries
                                     : cfg.archive_max_entries) = n;
    } else if (name == "watch-ring-bytes" || name == "track-hash-max-bytes" || name == "archive-max-bytes" ||
               name == "journal-event-max-bytes") {
      int64_t n;
      int64_t lo = name == "track-hash-max-bytes" ? 0 : name == "watch-ring-bytes" ? 4096 : 1;
      if (!need_value() || !parse_int(value, lo, int64_t(1) << 50, n))
        return "--" + name + " needs a byte count >= " + std::to_string(lo);
      (name == "watch-ring-bytes"       ? cfg.watch_ring_bytes
       : name == "track-hash-max-bytes" ? cfg.track_hash_max_bytes
       : name == "archive-max-bytes"    ? cfg.archive_max_bytes
                                        : cfg.journal_event_max_bytes) = n;
    } else if (name == "watch-retention" || name == "watch-coalesce" || name == "freeze-timeout" ||
               name == "idle-after") {
      int64_t ms;
      if (!need_value() || (ms = parse_duration_ms(value)) < 0 || (name == "freeze-timeout" && ms == 0))
        return "--" + name + " needs a duration like 50ms, 5s or 10m";
      (name == "watch-retention"  ? cfg.watch_retention_ms
       : name == "watch-coalesce" ? cfg.watch_coalesce_ms
       : name == "freeze-timeout" ? cfg.freeze_timeout_ms
                                  : cfg.idle_after_ms) = ms;
    } else if (name == "jupyter-host") {
      if (!need_value()) return "--jupyter-host needs a URL";
      cfg.jupyter_host = value;
      jupyter_host_flag = true;
    } else if (name == "jupyter-token") {
      if (!need_value()) return "--jupyter-token needs a value";
      cfg.jupyter_token = value;
      jupyter_token_flag = true;
    } else if (name == "jupyter-idle-poll-interval") {
      double ns;
      if (!need_value() || !parse_go_duration_ns(value, ns))
        return "--jupyter-idle-poll-interval needs a duration like 100ms";
      // Go: <= 0 falls back to the default 100ms.
      cfg.jupyter_idle_poll_interval_ms = ns <= 0 ? 100 : static_cast<int64_t>(ns / 1e6);
      jupyter_poll_flag = true;
    } else {
      return "unknown flag: " + raw;
    }
  }
  if (cfg.show_help || cfg.show_version) return {};
  if (!cfg.tcp && cfg.vsock_port == 0) return "--no-tcp needs --vsock-port (execd would listen nowhere)";

  // Access token: the first source found wins; only that one is read.
  if (token_flag) {
    cfg.access_token = token_flag_value;
    cfg.access_token_source = "--access-token";
    if (token_file_flag) cfg.warnings.push_back("--access-token-file ignored: --access-token was given");
  } else if (token_file_flag) {
    switch (read_token_file(token_file, cfg.access_token)) {
      case TokenFileError::unreadable: return "cannot read --access-token-file " + token_file;
      case TokenFileError::empty: return "--access-token-file " + token_file + " is empty";
      case TokenFileError::none: break;
    }
    cfg.access_token_source = "--access-token-file";
  } else if (const char* t = getenv_nonempty("EXECD_ACCESS_TOKEN")) {
    cfg.access_token = t;
    cfg.access_token_source = "EXECD_ACCESS_TOKEN";
  } else if (const char* path = getenv_nonempty("EXECD_ACCESS_TOKEN_FILE")) {
    switch (read_token_file(path, cfg.access_token)) {
      case TokenFileError::unreadable: return "cannot read EXECD_ACCESS_TOKEN_FILE " + std::string(path);
      case TokenFileError::empty: return "EXECD_ACCESS_TOKEN_FILE " + std::string(path) + " is empty";
      case TokenFileError::none: break;
    }
    cfg.access_token_source = "EXECD_ACCESS_TOKEN_FILE";
  }
  // The OpenSandbox server (runtime.execd_run_as_init) sets EXECD_INIT=1.
  if (const char* v = getenv_nonempty("EXECD_INIT")) {
    bool on = false;
    if (protocol::parse_go_bool(v, on) && on) cfg.init_mode = true;
  }
  if (!cfg.entrypoint.empty() && !cfg.init_mode)
    return "unexpected argument: " + cfg.entrypoint.front() + " (an entrypoint after -- needs --init)";
  // A warm-pool execd may start without a token: POST /init brings its hash.
  if (cfg.access_token.empty() && !cfg.insecure_no_auth && !cfg.runtime_init)
    return "no access token: give --access-token, --access-token-file, EXECD_ACCESS_TOKEN or "
           "EXECD_ACCESS_TOKEN_FILE (or --insecure-no-auth to run without one)";
  if (!cfg.access_token.empty() && cfg.insecure_no_auth)
    return "--insecure-no-auth given together with an access token (from " + cfg.access_token_source + ")";

  // The envd token, the same way: flag, file flag, env, env file.
  if (envd_token_flag) {
    cfg.envd_access_token = envd_token_flag_value;
    cfg.envd_access_token_source = "--envd-access-token";
  } else if (envd_token_file_flag) {
    if (read_token_file(envd_token_file, cfg.envd_access_token) != TokenFileError::none)
      return "cannot read a token from --envd-access-token-file " + envd_token_file;
    cfg.envd_access_token_source = "--envd-access-token-file";
  } else if (const char* t = getenv_nonempty("EXECD_ENVD_ACCESS_TOKEN")) {
    cfg.envd_access_token = t;
    cfg.envd_access_token_source = "EXECD_ENVD_ACCESS_TOKEN";
  } else if (const char* path = getenv_nonempty("EXECD_ENVD_ACCESS_TOKEN_FILE")) {
    if (read_token_file(path, cfg.envd_access_token) != TokenFileError::none)
      return "cannot read a token from EXECD_ENVD_ACCESS_TOKEN_FILE " + std::string(path);
    cfg.envd_access_token_source = "EXECD_ENVD_ACCESS_TOKEN_FILE";
  }
  // The ports from the environment too (a flag wins), so that an image's
  // fixed command line can turn the E2B listeners on: `docker run -e ...`.
  for (auto [var, port, flag] : {std::tuple{"EXECD_ENVD_PORT", &cfg.envd_port, envd_port_flag},
                                 std::tuple{"EXECD_CODE_INTERPRETER_PORT", &cfg.code_interpreter_port,
                                            code_interpreter_port_flag}}) {
    const char* v = getenv_nonempty(var);
    if (!v || flag) continue;
    int64_t p;
    if (!parse_int(v, 0, 65535, p)) return std::string(var) + " needs a number between 0 and 65535";
    *port = static_cast<int>(p);
  }
  // The E2B listeners take execd's token or the envd one (execd/access);
  // with neither (--insecure-no-auth and no envd token) they are open, for
  // E2B's SDKs in debug mode, which send no token: then loopback only.
  bool e2b_open = cfg.insecure_no_auth && cfg.envd_access_token.empty();
  if (!envd_host_flag) cfg.envd_host = e2b_open ? "127.0.0.1" : cfg.host;
  if (e2b_open && (cfg.envd_port >= 0 || cfg.code_interpreter_port >= 0) && !is_loopback_address(cfg.envd_host))
    return "--envd-host " + cfg.envd_host +
           " is not a loopback address: with --insecure-no-auth and no --envd-access-token the E2B "
           "listeners take no token, so they only listen on loopback";

  if (const char* g = getenv_nonempty("EXECD_API_GRACE_SHUTDOWN"); g && !grace_flag) {
    // The Go daemon's env fallback; a flag wins.
    double ns;
    if (!parse_go_duration_ns(g, ns)) return "EXECD_API_GRACE_SHUTDOWN must be a duration like 1s";
    cfg.graceful_shutdown_ms = ns <= 0 ? 0 : static_cast<int64_t>(ns / 1e6);
  }

  // Go's Jupyter settings: env first, a flag wins. Kept, but unused.
  if (!jupyter_host_flag) {
    if (const char* h = getenv_nonempty("JUPYTER_HOST")) cfg.jupyter_host = h;
  }
  if (!jupyter_token_flag) {
    if (const char* t = getenv_nonempty("JUPYTER_TOKEN")) cfg.jupyter_token = t;
  }
  if (const char* p = getenv_nonempty("EXECD_JUPYTER_IDLE_POLL_INTERVAL"); p && !jupyter_poll_flag) {
    double ns;
    if (!parse_go_duration_ns(p, ns)) return "EXECD_JUPYTER_IDLE_POLL_INTERVAL must be a duration like 100ms";
    cfg.jupyter_idle_poll_interval_ms = ns <= 0 ? 100 : static_cast<int64_t>(ns / 1e6);
    cfg.warnings.push_back("EXECD_JUPYTER_IDLE_POLL_INTERVAL is set but ignored: execd runs Jupyter kernels itself, no Jupyter server");
  }
  const char* kIgnored = " but ignored: execd runs Jupyter kernels itself (from kernelspecs), no Jupyter server";
  if (jupyter_host_flag) cfg.warnings.push_back(std::string("--jupyter-host accepted") + kIgnored);
  else if (!cfg.jupyter_host.empty()) cfg.warnings.push_back(std::string("JUPYTER_HOST is set") + kIgnored);
  if (jupyter_token_flag) cfg.warnings.push_back(std::string("--jupyter-token accepted") + kIgnored);
  else if (!cfg.jupyter_token.empty()) cfg.warnings.push_back(std::string("JUPYTER_TOKEN is set") + kIgnored);
  if (jupyter_poll_flag) cfg.warnings.push_back(std::string("--jupyter-idle-poll-interval accepted") + kIgnored);
  if (getenv_nonempty("EXECD_ISOLATION_CONFIG"))
    cfg.warnings.push_back("EXECD_ISOLATION_CONFIG is set but ignored: execd takes --isolated-allowed-paths, "
                           "--drop-caps, --no-new-privs, --seccomp and --landlock instead");
  if (getenv_nonempty("EXECD_LOG_FILE"))
    cfg.warnings.push_back("EXECD_LOG_FILE is set but ignored: execd logs to stderr");
  return {};
}

}  // namespace execd
