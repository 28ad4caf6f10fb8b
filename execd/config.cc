// execd/config: see header.
#include "execd/config.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace execd {

const char* const kUsage =
    "usage: execd [options]\n"
    "  --host ADDR                     listen address (default 0.0.0.0)\n"
    "  --port N                        listen port (default 44772)\n"
    "  --access-token TOKEN            required X-EXECD-ACCESS-TOKEN value\n"
    "  --access-token-file PATH        read the token from a file (trailing newline ignored)\n"
    "                                  (else env EXECD_ACCESS_TOKEN)\n"
    "  --insecure-no-auth              run without a token (logs a warning)\n"
    "  --log-level LEVEL               trace|debug|info|warn|error|off, or Go's 0-7 (default info)\n"
    "  --log-format text|json          log line format (default text)\n"
    "  --state-dir DIR                 retained command output (default $TMPDIR/execd-<pid>)\n"
    "  --framing compat|exact          stream framing for every request (default compat;\n"
    "                                  a request may ask for exact with Accept: application/x-ndjson)\n"
    "  --graceful-shutdown-timeout D   drain time on SIGTERM (default 1s; ms if no unit)\n"
    "  --retention D                   keep finished commands and their output (default 15m)\n"
    "  --log-limit BYTES               retained output per command (default 67108864)\n"
    "  --max-body BYTES                largest JSON request body (default 8388608)\n"
    "  --pty-replay-bytes BYTES        replay buffer per PTY session (default 1048576)\n"
    "  --kill-grace D                  TERM to KILL delay on timeout/interrupt (default 2s)\n"
    "  --idle-timeout D                close connections silent this long between requests (default 2m)\n"
    "  --init                          PID-1 duties: reap orphans, forward SIGTERM/SIGINT\n"
    "  --help, --version\n";

int64_t parse_duration_ms(const std::string& s) {
  if (s.empty()) return -1;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (errno || end == s.c_str() || v < 0) return -1;
  std::string unit(end);
  double mult;
  if (unit.empty() || unit == "ms") mult = 1;
  else if (unit == "s") mult = 1000;
  else if (unit == "m") mult = 60000;
  else if (unit == "h") mult = 3600000;
  else if (unit == "us" || unit == "µs") mult = 0.001;
  else return -1;
  return static_cast<int64_t>(v * mult);
}

namespace {

bool parse_int(const std::string& s, int64_t lo, int64_t hi, int64_t& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno || *end || v < lo || v > hi) return false;
  out = v;
  return true;
}

bool valid_log_level(const std::string& l) {
  static const char* kLevels[] = {"trace", "debug", "info", "warn", "warning", "error", "critical", "off"};
  for (auto* k : kLevels)
    if (l == k) return true;
  int64_t n;
  return parse_int(l, 0, 10, n);
}

}  // namespace

std::string parse_config(int argc, char** argv, Config& cfg) {
  std::string token_file;
  bool token_flag = false, grace_flag = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) == 0) arg = arg.substr(2);
    else if (arg.rfind("-", 0) == 0) arg = arg.substr(1);
    else return "unexpected argument: " + std::string(argv[i]);
    std::string name = arg, value;
    bool has_value = false;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    auto need_value = [&]() -> bool {
      if (has_value) return true;
      if (i + 1 >= argc) return false;
      value = argv[++i];
      return true;
    };
    auto flag_only = [&]() { return !has_value; };
    if (name == "help" || name == "h") {
      cfg.show_help = true;
    } else if (name == "version") {
      cfg.show_version = true;
    } else if (name == "insecure-no-auth") {
      if (!flag_only()) return "--insecure-no-auth takes no value";
      cfg.insecure_no_auth = true;
    } else if (name == "init") {
      if (!flag_only()) return "--init takes no value";
      cfg.init_mode = true;
    } else if (name == "host") {
      if (!need_value() || value.empty()) return "--host needs an address";
      cfg.host = value;
    } else if (name == "port") {
      int64_t p;
      if (!need_value() || !parse_int(value, 0, 65535, p)) return "--port needs a number between 0 and 65535 (0 = any free port)";
      cfg.port = static_cast<int>(p);
    } else if (name == "access-token") {
      if (!need_value() || value.empty()) return "--access-token needs a non-empty value";
      cfg.access_token = value;
      token_flag = true;
    } else if (name == "access-token-file") {
      if (!need_value() || value.empty()) return "--access-token-file needs a path";
      token_file = value;
    } else if (name == "log-level") {
      if (!need_value() || !valid_log_level(value)) return "--log-level must be trace|debug|info|warn|error|off or 0-7";
      cfg.log_level = value;
    } else if (name == "log-format") {
      if (!need_value() || (value != "text" && value != "json")) return "--log-format must be text or json";
      cfg.log_format = value == "json" ? LogFormat::json : LogFormat::text;
    } else if (name == "state-dir") {
      if (!need_value() || value.empty()) return "--state-dir needs a directory";
      cfg.state_dir = value;
    } else if (name == "framing") {
      if (!need_value() || (value != "compat" && value != "exact")) return "--framing must be compat or exact";
      cfg.exact_framing = value == "exact";
    } else if (name == "graceful-shutdown-timeout" || name == "retention" || name == "kill-grace" ||
               name == "idle-timeout") {
      int64_t ms;
      if (!need_value() || (ms = parse_duration_ms(value)) < 0)
        return "--" + name + " needs a duration like 1500ms, 2s or 1m";
      grace_flag |= name == "graceful-shutdown-timeout";
      (name == "retention"      ? cfg.retention_ms
       : name == "kill-grace"   ? cfg.kill_grace_ms
       : name == "idle-timeout" ? cfg.idle_timeout_ms
                                : cfg.graceful_shutdown_ms) = ms;
    } else if (name == "log-limit" || name == "max-body") {
      int64_t n;
      if (!need_value() || !parse_int(value, 0, int64_t(1) << 50, n)) return "--" + name + " needs a byte count";
      (name == "log-limit" ? cfg.log_limit_bytes : cfg.max_body_bytes) = n;
    } else if (name == "pty-replay-bytes") {
      int64_t n;
      if (!need_value() || !parse_int(value, 1, int64_t(1) << 40, n)) return "--pty-replay-bytes needs a byte count >= 1";
      cfg.pty_replay_bytes = n;
    } else {
      return "unknown flag: " + std::string(argv[i]);
    }
  }
  if (cfg.show_help || cfg.show_version) return {};

  if (!token_file.empty()) {
    if (token_flag) return "give either --access-token or --access-token-file, not both";
    std::ifstream f(token_file);
    if (!f) return "cannot read --access-token-file " + token_file;
    std::stringstream ss;
    ss << f.rdbuf();
    std::string t = ss.str();
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ' || t.back() == '\t')) t.pop_back();
    if (t.empty()) return "--access-token-file " + token_file + " is empty";
    cfg.access_token = t;
  } else if (!token_flag) {
    if (const char* env = getenv("EXECD_ACCESS_TOKEN"); env && *env) cfg.access_token = env;
  }
  if (cfg.access_token.empty() && !cfg.insecure_no_auth)
    return "no access token: give --access-token, --access-token-file or EXECD_ACCESS_TOKEN "
           "(or --insecure-no-auth to run without one)";
  if (!cfg.access_token.empty() && cfg.insecure_no_auth)
    return "--insecure-no-auth given together with an access token";
  if (const char* g = getenv("EXECD_API_GRACE_SHUTDOWN"); g && *g && !grace_flag) {
    // The Go daemon's env fallback; a flag wins (contract 13.1).
    int64_t ms = parse_duration_ms(g);
    if (ms < 0) return "EXECD_API_GRACE_SHUTDOWN must be a duration like 1s";
    cfg.graceful_shutdown_ms = ms;
  }
  return {};
}

}  // namespace execd
