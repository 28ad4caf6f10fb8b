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

namespace execd::protocol {

struct CommandRequest {
  std::string command;
  std::string cwd;
  bool background = false;
  int64_t timeout_ms = 0;  // 0 = none
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;
  std::map<std::string, std::string> envs;
  bool tty = false;
  uint16_t rows = 24;
  uint16_t cols = 80;
};

struct DecodeError {
  std::string message;
};

// Validation per contract 4.1: command non-empty, timeout >= 0, gid needs uid,
// uid/gid unsigned 32-bit, envs an object of strings.
std::variant<CommandRequest, DecodeError> decode_command_request(std::string_view body);

}  // namespace execd::protocol
