// execd/config: the command line, environment fallbacks and their validation.
// Parsing never exits the process itself; main decides what to do.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace execd {

enum class LogFormat { text, json };

struct Config {
  std::string host = "0.0.0.0";
  int port = 44772;
  std::string access_token;  // empty only with insecure_no_auth
  bool insecure_no_auth = false;
  std::string log_level = "info";
  LogFormat log_format = LogFormat::text;
  std::string state_dir;          // default: $TMPDIR/execd-<pid>
  bool exact_framing = false;     // --framing exact
  int64_t graceful_shutdown_ms = 1000;
  int64_t retention_ms = 15 * 60 * 1000;  // finished command records and output
  int64_t log_limit_bytes = 64ll << 20;   // retained output per command
  int64_t max_body_bytes = 8ll << 20;     // buffered JSON bodies
  int64_t kill_grace_ms = 2000;           // TERM → KILL on timeout/interrupt
  int64_t idle_timeout_ms = 120 * 1000;   // silent client with no response in progress
  size_t max_records = 4096;              // finished records kept at most
  int64_t pty_replay_bytes = 1ll << 20;   // replay ring per PTY session
  bool init_mode = false;                 // PID-1 duties
  bool show_help = false, show_version = false;
};

// Parses argv (flags in `--name value` or `--name=value` form, one or two
// dashes). Returns an empty string on success, else a one-line reason.
std::string parse_config(int argc, char** argv, Config& cfg);

// "1500", "1500ms", "2s", "1m", "1h" → milliseconds; -1 if malformed.
int64_t parse_duration_ms(const std::string& s);

extern const char* const kUsage;

}  // namespace execd
