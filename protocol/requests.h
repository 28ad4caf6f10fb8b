// protocol/requests: decoding and validating JSON request bodies (simdjson).
// Produces plain structs; whether a cwd exists or a uid can be used is for
// the caller to find out.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace execd::protocol {

struct CommandRequest {
  std::string command;             // shell text, or
  std::vector<std::string> argv;   // the program and its literal arguments (no shell)
  std::string cwd;
  bool background = false;
  int64_t timeout_ms = 0;  // 0 = none
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;
  std::map<std::string, std::string> envs;
  bool tty = false;
  uint16_t rows = 24;
  uint16_t cols = 80;
  std::string id;           // client-chosen (idempotent start); empty: execd picks one
  bool stdin_open = false;  // "stdin": true keeps stdin open for POST /command/{id}/stdin
  // "limits": {"memory_bytes", "pids", "cpu_shares"}, each optional, > 0;
  // applied through the command's cgroup. 0 = not asked for.
  int64_t limit_memory_bytes = 0;
  int64_t limit_pids = 0;
  int64_t limit_cpu_shares = 0;
  // "track_changes": roots whose changes while it runs the result lists.
  std::vector<std::string> track_changes;
};

struct DecodeError {
  std::string message;
};

// Validation as the Go daemon's: exactly one of command (non-empty) and argv
// (strings, argv[0] non-empty, no NUL anywhere), timeout >= 0, gid needs
// uid, uid/gid unsigned 32-bit, envs an object of strings.
std::variant<CommandRequest, DecodeError> decode_command_request(std::string_view body);

// What a command is shown as (status "content", the journal, the inventory):
// the shell text, or argv quoted as a POSIX shell would need to run it.
std::string command_text(const CommandRequest& req);

// POST /session: optional body {"cwd"}. The DecodeError message is the bare
// reason ("invalid JSON body", "cwd must be a string"); the route words it.
struct SessionCreateRequest {
  std::string cwd;
};
std::variant<SessionCreateRequest, DecodeError> decode_session_create(std::string_view body);

// POST /session/{id}/run: {"command" (required), "cwd", "timeout" (ms >= 0), "track_changes"}.
struct SessionRunRequest {
  std::string command;
  std::string cwd;
  int64_t timeout_ms = 0;
  std::vector<std::string> track_changes;
};
std::variant<SessionRunRequest, DecodeError> decode_session_run(std::string_view body);

// POST /pty: optional body {"cwd", "command"}.
struct PtyCreateRequest {
  std::string cwd;
  std::string command;
};
std::variant<PtyCreateRequest, DecodeError> decode_pty_create(std::string_view body);

}  // namespace execd::protocol
