// execd/config_flags: see header. Above the table: the syntaxes values are
// written in (Go's, where the Go execd had the flag) and one reader per kind
// of value; below it, the table's look-ups.
#include "execd/config_flags.h"

#include <cerrno>
#include <cstdlib>
#include <type_traits>
#include <unordered_map>

#include "protocol/go_syntax.h"
#include "pty/hardening.h"

namespace execd {

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

// Milliseconds the way a duration flag takes them back: "1h30m", "10s",
// "1500ms", "0s".
std::string format_duration_ms(int64_t ms) {
  if (ms == 0) return "0s";
  if (ms % 1000 != 0) return std::to_string(ms) + "ms";
  std::string out;
  int64_t s = ms / 1000;
  for (auto [unit, seconds] : {std::pair{"h", 3600}, std::pair{"m", 60}, std::pair{"s", 1}}) {
    if (s >= seconds) out += std::to_string(s / seconds) + unit;
    s %= seconds;
  }
  return out;
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

bool non_empty(std::string& v) { return !v.empty(); }

// cgroupfs takes any name; ".." would climb out of the hierarchy execd was given.
bool absolute_cgroup(std::string& v) { return !v.empty() && v[0] == '/' && v.find("..") == std::string::npos; }

// "a:b:c" -> absolute, non-empty paths without trailing slashes; false if any is not.
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

std::string join_paths(const std::vector<std::string>& paths) {
  std::string out;
  for (const auto& p : paths) out += (out.empty() ? "" : ":") + p;
  return out;
}

// The readers, one per kind of value. Each writes one Config field (the
// token flags: one TokenFlags field), converted to the field's type.

using config_flags::Reader;
using config_flags::Target;
using config_flags::TokenFlags;

// -name turns the field on, -name=BOOL sets it (Go's strconv.ParseBool).
Reader switch_on(bool Config::*field) {
  return {.takes_value = false,
          .read = [field](const std::string& v, Target& t) { return protocol::parse_go_bool(v, t.cfg.*field); },
          .show = [](const Config&) { return std::string(); },
          .needs = "needs true or false"};
}

// A "--no-..." switch: -name turns the field off.
Reader switch_off(bool Config::*field) {
  return {.takes_value = false,
          .read =
              [field](const std::string& v, Target& t) {
                bool on;
                if (!protocol::parse_go_bool(v, on)) return false;
                t.cfg.*field = !on;
                return true;
              },
          .show = [](const Config&) { return std::string(); },
          .needs = "needs true or false"};
}

// Go's flag package prints the usage for -h and -help whatever their value.
Reader help_request(bool Config::*field) {
  return {.takes_value = false,
          .read =
              [field](const std::string&, Target& t) {
                t.cfg.*field = true;
                return true;
              },
          .show = [](const Config&) { return std::string(); },
          .needs = ""};
}

// An integer in Go's syntax (ParseInt base 0: 0x1F, 0o17, 1_000) within
// [lo, hi], said as `needs`.
template <class T>
Reader integer(T Config::*field, int64_t lo, int64_t hi, std::string needs) {
  return {.read =
              [field, lo, hi](const std::string& v, Target& t) {
                int64_t n;
                if (!parse_int(v, lo, hi, n)) return false;
                t.cfg.*field = static_cast<T>(n);
                return true;
              },
          .show = [field](const Config& d) { return std::to_string(d.*field); },
          .needs = std::move(needs)};
}

// A port or other identifier: the whole range is the point. `note` follows
// the range in the error.
template <class T>
Reader number(T Config::*field, int64_t lo, int64_t hi, std::string note = "") {
  return integer(field, lo, hi,
                 "needs a number between " + std::to_string(lo) + " and " + std::to_string(hi) + note);
}

// A count whose upper bound is a real limit.
template <class T>
Reader count_in(T Config::*field, int64_t lo, int64_t hi) {
  return integer(field, lo, hi, "needs a count from " + std::to_string(lo) + " to " + std::to_string(hi));
}

// A count whose upper bound only keeps arithmetic sane (not worth saying).
template <class T>
Reader count(T Config::*field, int64_t lo, int64_t sanity_cap) {
  return integer(field, lo, sanity_cap, "needs a count >= " + std::to_string(lo));
}

Reader bytes(int64_t Config::*field, int64_t lo, int64_t sanity_cap) {
  return integer(field, lo, sanity_cap, lo == 0 ? "needs a byte count" : "needs a byte count >= " + std::to_string(lo));
}

// A duration in milliseconds: Go's syntax or a bare number of milliseconds;
// at least `least_ms` (0, or 1 where zero would mean "give up at once").
Reader duration_at_least(int64_t Config::*field, int64_t least_ms, std::string needs) {
  return {.read =
              [field, least_ms](const std::string& v, Target& t) {
                int64_t ms = parse_duration_ms(v);
                if (ms < least_ms) return false;
                t.cfg.*field = ms;
                return true;
              },
          .show = [field](const Config& d) { return format_duration_ms(d.*field); },
          .needs = std::move(needs)};
}

Reader duration(int64_t Config::*field) {
  return duration_at_least(field, 0, "needs a duration like 1500ms, 2s or 1m");
}

Reader positive_duration(int64_t Config::*field) {
  return duration_at_least(field, 1, "needs a positive duration like 500ms, 30s or 2m");
}

// A duration the Go execd had, read as Go reads it: negative is allowed and,
// like zero, means `if_not_positive` milliseconds.
Reader go_duration(int64_t Config::*field, int64_t if_not_positive) {
  return {.read =
              [field, if_not_positive](const std::string& v, Target& t) {
                double ns;
                if (!parse_go_duration_ns(v, ns)) return false;
                t.cfg.*field = ns <= 0 ? if_not_positive : static_cast<int64_t>(ns / 1e6);
                return true;
              },
          .show = [field](const Config& d) { return format_duration_ms(d.*field); },
          .needs = "needs a duration like 1500ms, 2s or 1m"};
}

// Text, checked (and perhaps normalized) by `valid`; null: anything goes.
template <class Owner>
Reader text(std::string Owner::*field, std::string needs, bool (*valid)(std::string&) = nullptr) {
  return {.read =
              [field, valid](const std::string& v, Target& t) {
                std::string value = v;
                if (valid && !valid(value)) return false;
                if constexpr (std::is_same_v<Owner, Config>) t.cfg.*field = std::move(value);
                else t.tokens.*field = std::move(value);
                return true;
              },
          .show =
              [field](const Config& d) {
                if constexpr (std::is_same_v<Owner, Config>) return d.*field;
                else return std::string();
              },
          .needs = std::move(needs)};
}

// One of a few names; the field takes the name's position (a bool or an
// enum whose values are 0, 1...).
template <class T>
Reader choice(T Config::*field, std::vector<std::string> names) {
  std::string needs = "must be ";
  for (size_t i = 0; i < names.size(); ++i) needs += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return {.read =
              [field, names](const std::string& v, Target& t) {
                for (size_t i = 0; i < names.size(); ++i) {
                  if (v != names[i]) continue;
                  t.cfg.*field = static_cast<T>(i);
                  return true;
                }
                return false;
              },
          .show = [field, names](const Config& d) { return names.at(static_cast<size_t>(d.*field)); },
          .needs = needs};
}

Reader paths(std::vector<std::string> Config::*field) {
  return {.read =
              [field](const std::string& v, Target& t) {
                std::vector<std::string> list;
                if (!parse_path_list(v, list)) return false;
                t.cfg.*field = std::move(list);
                return true;
              },
          .show = [field](const Config& d) { return join_paths(d.*field); },
          .needs = "needs absolute paths separated by ':'"};
}

// Takes a value and keeps nothing (the Go execd's settings execd does without).
Reader ignored(std::string needs) {
  return {.read = [](const std::string&, Target&) { return true; },
          .show = [](const Config&) { return std::string(); },
          .needs = std::move(needs)};
}

const char* const kAnyFreePort = " (0 = any free port)";
constexpr int64_t kCountCap = int64_t(1) << 24;     // far beyond any sandbox's needs
constexpr int64_t kBigCountCap = int64_t(1) << 30;  // watches: directories and entries
constexpr int64_t kByteCap = int64_t(1) << 50;

std::string default_landlock_writable() {
  std::vector<std::string> list;
  for (const char* const* p = pty::kDefaultLandlockWritable; *p; ++p) list.emplace_back(*p);
  return join_paths(list);
}

const char* const kNoJupyterServer =
    "execd runs Jupyter kernels itself (from kernelspecs), no Jupyter server";
const char* const kNoIsolationConfig =
    "execd takes --isolated-allowed-paths, --drop-caps, --no-new-privs, --seccomp and --landlock instead";

using config_flags::EnvUse;
using config_flags::Flag;
using config_flags::FlagGroup;
using config_flags::Secrecy;

std::vector<FlagGroup> build_table() {
  return {
      {"Listening",
       {
           {.name = "host", .value_name = "ADDR", .reader = text(&Config::host, "needs an address", non_empty),
            .help = "listen address"},
           {.name = "port", .value_name = "N", .reader = number(&Config::port, 0, 65535, kAnyFreePort),
            .help = "listen port (0: any free port; the log line `listening on HOST:PORT` names it)"},
           // 32-bit ports; 0xFFFFFFFF is VMADDR_PORT_ANY, not a port to listen on.
           {.name = "vsock-port", .value_name = "N", .reader = number(&Config::vsock_port, 1, 0xFFFFFFFEll),
            .help = "also listen on AF_VSOCK port N (any CID), as Kata and Firecracker hosts reach a guest: "
                    "the same routes, token and connection limits",
            .default_text = "off"},
           {.name = "no-tcp", .reader = switch_off(&Config::tcp),
            .help = "no TCP listener: vsock only (needs --vsock-port)"},
       }},
      {"Access",
       {
           {.name = "access-token", .value_name = "TOKEN", .reader = text(&TokenFlags::access_token, "needs a non-empty value", non_empty),
            .help = "the X-EXECD-ACCESS-TOKEN every route but GET /ping requires. The first token source set "
                    "wins and only it is read: --access-token, --access-token-file, EXECD_ACCESS_TOKEN, "
                    "EXECD_ACCESS_TOKEN_FILE",
            .env = "EXECD_ACCESS_TOKEN", .env_use = EnvUse::token_source, .secrecy = Secrecy::token},
           {.name = "access-token-file", .value_name = "PATH",
            .reader = text(&TokenFlags::access_token_file, "needs a path", non_empty),
            .help = "read the token from a file, once at start (trailing whitespace ignored; a Kubernetes "
                    "Secret or downward-API file)",
            .env = "EXECD_ACCESS_TOKEN_FILE", .env_use = EnvUse::token_source, .secrecy = Secrecy::token_path},
           {.name = "insecure-no-auth", .reader = switch_on(&Config::insecure_no_auth),
            .help = "run without a token (logs a warning); the E2B listeners too unless they have an envd token"},
       }},
      {"Logging",
       {
           {.name = "log-level", .value_name = "LEVEL",
            .reader = text(&Config::log_level, "must be trace|debug|info|warn|error|off or 0-7", normalize_log_level),
            .help = "trace, debug, info, warn, error or off, or the Go execd's 0-7"},
           {.name = "log-format", .value_name = "FORMAT", .reader = choice(&Config::log_format, {"text", "json"}),
            .help = "text, or json: one object per line"},
       }},
      {"State, records and the journal",
       {
           {.name = "state-dir", .value_name = "DIR", .reader = text(&Config::state_dir, "needs a directory", non_empty),
            .help = "command records, retained output and the journal, kept across restarts (created 0700; "
                    "one execd at a time; when the default is unusable, a private $TMPDIR/execd-PID that goes away with it)",
            .default_text = kDefaultStateDir},
           {.name = "retention", .value_name = "D", .reader = duration(&Config::retention_ms),
            .help = "keep finished commands and their output this long"},
           {.name = "max-records", .value_name = "N", .reader = count_in(&Config::max_records, 1, 1 << 20),
            .help = "keep at most N finished ones; the oldest go first"},
           {.name = "cold-after", .value_name = "D", .reader = duration(&Config::cold_after_ms),
            .help = "keep a finished one unused this long as it is, then only its packed record (at once while "
                    "no client is connected)"},
           {.name = "log-limit", .value_name = "BYTES", .reader = bytes(&Config::log_limit_bytes, 0, kByteCap),
            .help = "retained output per command"},
           {.name = "state-budget", .value_name = "BYTES", .reader = bytes(&Config::state_budget_bytes, 0, kByteCap),
            .help = "everything execd keeps in --state-dir (retained output, records, journal, spools) together; "
                    "0: no absolute cap. Finished runs' output goes first, oldest first"},
           {.name = "state-budget-percent", .value_name = "N",
            .reader = count_in(&Config::state_budget_percent, 1, 100),
            .help = "the state budget is also at most N% of --state-dir's filesystem"},
           {.name = "state-floor-percent", .value_name = "N",
            .reader = count_in(&Config::state_floor_percent, 0, 100),
            .help = "execd never takes the last N% of --state-dir's filesystem, whoever filled the rest: the state "
                    "budget is at most what execd keeps plus what is free above them"},
           {.name = "journal-max-bytes", .value_name = "BYTES",
            .reader = bytes(&Config::journal_max_bytes, 4096, int64_t(1) << 40),
            .help = "rotate the execution journal past this size; one rotated file is kept"},
           {.name = "no-journal", .reader = switch_off(&Config::journal),
            .help = "keep no execution journal (the journal routes answer 404)"},
           {.name = "journal-event-max-bytes", .value_name = "BYTES",
            .reader = bytes(&Config::journal_event_max_bytes, 1, kByteCap),
            .help = "one event of POST /journal/events"},
       }},
      {"Requests and connections",
       {
           {.name = "framing", .value_name = "MODE", .reader = choice(&Config::exact_framing, {"compat", "exact"}),
            .help = "stream framing for every request (a request may ask for exact with "
                    "Accept: application/x-ndjson)"},
           {.name = "max-body", .value_name = "BYTES", .reader = bytes(&Config::max_body_bytes, 0, kByteCap),
            .help = "largest JSON request body"},
           {.name = "header-timeout", .value_name = "D", .reader = duration(&Config::header_timeout_ms),
            .help = "a request head must arrive within this from its first byte"},
           {.name = "body-timeout", .value_name = "D", .reader = duration(&Config::body_timeout_ms),
            .help = "longest silence inside a request body"},
           {.name = "idle-timeout", .value_name = "D", .reader = duration(&Config::idle_timeout_ms),
            .help = "close connections silent this long between requests"},
           {.name = "max-connections", .value_name = "N", .reader = count(&Config::max_connections, 1, kCountCap),
            .help = "connections held at once, never more than the open-files limit allows; idle and "
                    "unauthenticated ones are shed first"},
           {.name = "stdin-timeout", .value_name = "D", .reader = duration(&Config::stdin_timeout_ms),
            .help = "a stdin write waits this long for a command that does not read before answering 503"},
           {.name = "kill-grace", .value_name = "D", .reader = duration(&Config::kill_grace_ms),
            .help = "TERM to KILL delay on timeout or interrupt"},
           {.name = "graceful-shutdown-timeout", .value_name = "D",
            .reader = go_duration(&Config::graceful_shutdown_ms, 0),
            .help = "drain time on SIGTERM (negative, as in Go: none)", .env = "EXECD_API_GRACE_SHUTDOWN"},
           {.name = "proxy-timeout", .value_name = "D", .reader = positive_duration(&Config::proxy_timeout_ms),
            .help = "/proxy/{port}: 504 when the service sends no response head this long after the request, "
                    "or a body stops moving either way for this long"},
           {.name = "proxy-idle-timeout", .value_name = "D",
            .reader = positive_duration(&Config::proxy_idle_timeout_ms),
            .help = "/proxy/{port}: close a tunnel (after a 101) silent both ways this long"},
       }},
      {"What clients may keep at once (429 past it)",
       {
           {.name = "max-code-contexts", .value_name = "N", .reader = count(&Config::max_code_contexts, 1, kCountCap),
            .help = "code contexts (kernels), both APIs"},
           {.name = "max-sessions", .value_name = "N", .reader = count(&Config::max_sessions, 1, kCountCap),
            .help = "bash sessions"},
           {.name = "max-ptys", .value_name = "N", .reader = count(&Config::max_ptys, 1, kCountCap),
            .help = "PTY sessions"},
           {.name = "max-pty-viewers", .value_name = "N", .reader = count(&Config::max_pty_viewers, 1, kCountCap),
            .help = "read-only viewers per PTY session"},
           {.name = "operation-capacity", .value_name = "N",
            .reader = count(&Config::operation_capacity, 1, kCountCap),
            .help = "caller-bound creation records kept (POST /command/operations and /pty/operations; 503 "
                    "operation_capacity_exceeded past it, once expired ones are dropped)",
            .env = "EXECD_OPERATION_CAPACITY"},
           {.name = "pty-replay-bytes", .value_name = "BYTES",
            .reader = bytes(&Config::pty_replay_bytes, 1, int64_t(1) << 40), .help = "replay buffer per PTY session"},
           {.name = "max-running", .value_name = "N", .reader = count(&Config::max_running, 1, kCountCap),
            .help = "executions running: commands, session runs, code runs"},
           {.name = "max-readers", .value_name = "N", .reader = count(&Config::max_readers, 1, kCountCap),
            .help = "resume readers and retried starts streaming"},
           {.name = "max-journal-followers", .value_name = "N",
            .reader = count(&Config::max_journal_followers, 1, kCountCap), .help = "GET /journal?follow=true"},
           {.name = "max-tunnels", .value_name = "N", .reader = count(&Config::max_tunnels, 1, kCountCap),
            .help = "/proxy tunnels (after a 101)"},
           {.name = "code-spill-limit", .value_name = "BYTES",
            .reader = bytes(&Config::code_spill_limit_bytes, 0, kByteCap),
            .help = "/code output kept on disk for a slow client before its stream ends with OutputOverflow "
                    "(0: none)"},
           {.name = "max-kernel-message", .value_name = "BYTES",
            .reader = bytes(&Config::max_kernel_message_bytes, 4096, int64_t(1) << 40),
            .help = "largest message taken from a kernel; a larger one is skipped and the run told so on stderr"},
       }},
      {"Processes and cgroups",
       {
           {.name = "no-cgroups", .reader = switch_off(&Config::cgroups),
            .help = "no per-command cgroups: commands are process groups only (no limits, no containment of "
                    "setsid children)"},
           {.name = "cgroup-parent", .value_name = "PATH",
            .reader = text(&Config::cgroup_parent, "needs an absolute cgroup path like /execd", absolute_cgroup),
            .help = "cgroup (as in /proc/self/cgroup) under which execd-PID/cmd-N are made",
            .default_text = "execd's own cgroup"},
           {.name = "cgroup-spares", .value_name = "N", .reader = count_in(&Config::cgroup_spares, 0, 64),
            .help = "spare cgroups made ahead, each with a launcher process waiting in it to become the next "
                    "command, so a start writes no cgroup.procs (cgroup v1; 0: commands join theirs as they "
                    "start)"},
       }},
      {"Init and warm pools",
       {
           {.name = "init", .value_name = "[-- CMD ARGS...]", .reader = switch_on(&Config::init_mode),
            .help = "PID-1 duties: reap orphans; with CMD, start it (stdio inherited), forward "
                    "TERM/INT/HUP/USR1/USR2/WINCH to it and exit with its status",
            .env = "EXECD_INIT", .env_use = EnvUse::turns_on},
           {.name = "runtime-init", .reader = switch_on(&Config::runtime_init),
            .help = "warm pool: only /ping, /ready and /internal/init (or /init) answer until POST "
                    "/internal/init binds this execd (a token is then optional: the binding brings its hash); "
                    "the variable takes Go's booleans only (1 t T TRUE true True, 0 f F FALSE false False) and "
                    "never reaches a process execd starts",
            .env = "EXECD_RUNTIME_INIT"},
           {.name = "lifecycle-startup-status-file", .value_name = "PATH",
            .reader = text(&Config::lifecycle_status_file, "needs a path", non_empty),
            .help = "append startup progress to this existing file for bootstrap.sh's watchdog: 'running N' "
                    "before preStart hooks that may take N s, then 'done 0' (ready) or 'done 1' (a hook "
                    "failed); never created (a missing file fails startup)"},
       }},
      {"E2B SDKs",
       {
           {.name = "envd-port", .value_name = "N", .reader = number(&Config::envd_port, 0, 65535, kAnyFreePort),
            .help = "also speak E2B's envd API (Connect over HTTP/1.1) on this port (E2B uses 49983; 0: any "
                    "free port)",
            .default_text = "off", .env = "EXECD_ENVD_PORT"},
           {.name = "code-interpreter-port", .value_name = "N",
            .reader = number(&Config::code_interpreter_port, 0, 65535, kAnyFreePort),
            .help = "E2B's code-interpreter API (/execute, /contexts) on this port too (E2B uses 49999); also "
                    "served on --envd-port",
            .default_text = "off", .env = "EXECD_CODE_INTERPRETER_PORT"},
           {.name = "envd-host", .value_name = "ADDR", .reader = text(&Config::envd_host, "needs an address", non_empty),
            .help = "address of the E2B listeners; only loopback when they take no token (--insecure-no-auth "
                    "and no envd token)",
            .default_text = "--host; 127.0.0.1 when they take no token"},
           {.name = "envd-access-token", .value_name = "TOKEN",
            .reader = text(&TokenFlags::envd_access_token, "needs a non-empty value", non_empty),
            .help = "a token the E2B listeners take besides execd's (X-Access-Token); sources as for "
                    "--access-token",
            .env = "EXECD_ENVD_ACCESS_TOKEN", .env_use = EnvUse::token_source, .secrecy = Secrecy::token},
           {.name = "envd-access-token-file", .value_name = "PATH",
            .reader = text(&TokenFlags::envd_access_token_file, "needs a path", non_empty),
            .help = "read it from a file",
            .env = "EXECD_ENVD_ACCESS_TOKEN_FILE", .env_use = EnvUse::token_source,
            .secrecy = Secrecy::token_path},
           {.name = "envd-max-processes", .value_name = "N", .reader = count(&Config::envd_max_processes, 1, kCountCap),
            .help = "E2B processes running at once"},
           {.name = "envd-signal-scope", .value_name = "SCOPE",
            .reader = choice(&Config::envd_signal_scope, {"run", "leader"}),
            .help = "whom an E2B SendSignal without descendants reaches: everything the process started (run) "
                    "or the process alone, as envd (leader)"},
           {.name = "envd-max-watchers", .value_name = "N", .reader = count(&Config::envd_max_watchers, 1, kCountCap),
            .help = "E2B directory watchers at once"},
           {.name = "envd-watcher-queue", .value_name = "N", .reader = count(&Config::envd_watcher_queue, 1, kCountCap),
            .help = "events a polling watcher keeps between reads"},
           {.name = "envd-max-list-entries", .value_name = "N",
            .reader = count(&Config::envd_max_list_entries, 1, kCountCap), .help = "entries one ListDir may answer"},
       }},
      {"File-change feeds, change tracking and archives",
       {
           {.name = "max-watches", .value_name = "N", .reader = count(&Config::max_watches, 1, kBigCountCap),
            .help = "watched roots at once, feeds and track_changes"},
           {.name = "watch-ring-bytes", .value_name = "BYTES",
            .reader = bytes(&Config::watch_ring_bytes, 4096, kByteCap), .help = "events kept per watch for ?since= resume"},
           {.name = "watch-max-dirs", .value_name = "N", .reader = count(&Config::watch_max_dirs, 1, kBigCountCap),
            .help = "directories one recursive watch follows"},
           {.name = "watch-retention", .value_name = "D", .reader = duration(&Config::watch_retention_ms),
            .help = "keep a watch nobody reads this long"},
           {.name = "watch-coalesce", .value_name = "D", .reader = duration(&Config::watch_coalesce_ms),
            .help = "writes to one file within this are one event"},
           {.name = "track-max-entries", .value_name = "N",
            .reader = count(&Config::track_max_entries, 1, kBigCountCap), .help = "paths listed per run with track_changes"},
           {.name = "track-hash-max-bytes", .value_name = "BYTES",
            .reader = bytes(&Config::track_hash_max_bytes, 0, kByteCap),
            .help = "changed files up to this size get a SHA-256"},
           {.name = "archive-max-entries", .value_name = "N",
            .reader = count(&Config::archive_max_entries, 1, kBigCountCap),
            .help = "entries one archive extraction may create"},
           {.name = "archive-max-bytes", .value_name = "BYTES",
            .reader = bytes(&Config::archive_max_bytes, 1, kByteCap),
            .help = "bytes one archive extraction, or one gzip upload, may write"},
       }},
      {"Pause cooperation",
       {
           {.name = "freeze-timeout", .value_name = "D", .reader = positive_duration(&Config::freeze_timeout_ms),
            .help = "POST /freeze gives up and thaws after this"},
           {.name = "idle-after", .value_name = "D", .reader = duration(&Config::idle_after_ms),
            .help = "GET /activity says idle after this long quiet"},
       }},
      {"Isolated sessions and the hardening floor",
       {
           {.name = "max-isolated-sessions", .value_name = "N",
            .reader = count(&Config::max_isolated_sessions, 1, kCountCap),
            .help = "isolated sessions (/v1/isolated) at once"},
           {.name = "no-isolation", .reader = switch_off(&Config::isolation),
            .help = "no isolated sessions: /v1/isolated/capabilities says so"},
           {.name = "isolated-allowed-paths", .value_name = "LIST", .reader = paths(&Config::isolated_allowed_paths),
            .help = "binds and extra_writable of isolated sessions must lie beneath one of these (':'-separated)"},
           {.name = "isolated-root-view", .value_name = "MODE",
            .reader = choice(&Config::isolated_root_view, {"auto", "idmapped", "masked"}),
            .help = "how sessions see the host's root: idmapped (the host root's files are nobody's in a session), "
                    "masked (the root as it is, a fixed list of root-only files covered), or auto (idmapped where "
                    "the kernel and root file system allow it, else masked; README, \"Isolated sessions\")"},
           {.name = "drop-caps", .reader = switch_on(&Config::drop_caps),
            .help = "every process execd starts keeps only Docker's default capabilities"},
           {.name = "no-new-privs", .reader = switch_on(&Config::no_new_privs),
            .help = "no_new_privs on every process (setuid binaries and file capabilities grant nothing)"},
           {.name = "seccomp", .reader = switch_on(&Config::seccomp),
            .help = "execd's syscall deny-list (docs/security.md, \"Hardening floor\") on every process (implies "
                    "--no-new-privs)"},
           {.name = "landlock", .reader = switch_on(&Config::landlock),
            .help = "every process may write only beneath --landlock-writable (implies --no-new-privs)"},
           {.name = "landlock-writable", .value_name = "LIST", .reader = paths(&Config::landlock_writable),
            .help = "where --landlock lets every process write (':'-separated)",
            .default_text = default_landlock_writable()},
       }},
      {"The Go execd's, accepted and ignored (one warning each)",
       {
           {.name = "jupyter-host", .value_name = "URL", .reader = text(&Config::jupyter_host, "needs a URL"),
            .help = "the Jupyter server the Go execd used", .env = "JUPYTER_HOST",
            .ignored_because = kNoJupyterServer},
           {.name = "jupyter-token", .value_name = "TOKEN", .reader = text(&Config::jupyter_token, "needs a value"),
            .help = "its token", .env = "JUPYTER_TOKEN", .secrecy = Secrecy::token,
            .ignored_because = kNoJupyterServer},
           {.name = "jupyter-idle-poll-interval", .value_name = "D",
            .reader = go_duration(&Config::jupyter_idle_poll_interval_ms, 100),
            .help = "how often it polled the server", .env = "EXECD_JUPYTER_IDLE_POLL_INTERVAL",
            .ignored_because = kNoJupyterServer},
           {.name = "isolation-config", .value_name = "PATH", .reader = ignored("needs a path"),
            .help = "the Go execd's TOML file of isolation and hardening settings (not read)",
            .env = "EXECD_ISOLATION_CONFIG", .ignored_because = kNoIsolationConfig},
           {.reader = ignored("needs a path"), .help = "the Go execd's log file", .env = "EXECD_LOG_FILE",
            .ignored_because = "execd logs to stderr"},
       }},
      {"About execd",
       {
           {.name = "help", .alias = "h", .reader = help_request(&Config::show_help), .help = "print this usage"},
           {.name = "help-markdown", .reader = switch_on(&Config::show_help_markdown),
            .help = "print this reference as markdown (docs/command-line.md holds it)"},
           {.name = "version", .reader = switch_on(&Config::show_version), .help = "print execd's version"},
       }},
  };
}

}  // namespace

int64_t parse_duration_ms(const std::string& s) {
  double ns;
  if (!parse_go_duration_ns(s, ns) || ns < 0) return -1;
  return static_cast<int64_t>(ns / 1e6);
}

namespace config_flags {

const std::vector<FlagGroup>& flag_table() {
  static const std::vector<FlagGroup> table = build_table();
  return table;
}

const Flag* find_flag(std::string_view name) {
  static const std::unordered_map<std::string_view, const Flag*> by_name = [] {
    std::unordered_map<std::string_view, const Flag*> m;
    for (const FlagGroup& g : flag_table())
      for (const Flag& f : g.flags) {
        if (!f.name.empty()) m.emplace(f.name, &f);
        if (!f.alias.empty()) m.emplace(f.alias, &f);
      }
    return m;
  }();
  auto it = by_name.find(name);
  return it == by_name.end() ? nullptr : it->second;
}

std::string default_of(const Flag& flag) {
  static const Config defaults;
  return flag.default_text.empty() ? flag.reader.show(defaults) : flag.default_text;
}

}  // namespace config_flags

}  // namespace execd
