// protocol/operations: the wire side of caller-bound creation (OpenSandbox
// PR 1771, branch commits 397f5c38 / 05e1ccc5): the operation identity
// `<instance_id>.<issued_at>.<token>`, the strict ("keyed") decoding of
// POST /command/operations and POST /pty/operations bodies, and the
// documents and lower-case error codes those routes answer with. No state:
// the records are execd/exec/operations'.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "protocol/errors.h"
#include "protocol/requests.h"

namespace execd::protocol {

namespace operation_codes {
inline constexpr std::string_view kInvalidId = "invalid_operation_id";
inline constexpr std::string_view kInvalidKind = "invalid_operation_kind";
inline constexpr std::string_view kInstanceMismatch = "operation_instance_mismatch";
inline constexpr std::string_view kConflict = "operation_conflict";
inline constexpr std::string_view kExpired = "operation_expired";
inline constexpr std::string_view kNotFound = "operation_not_found";
inline constexpr std::string_view kCapacity = "operation_capacity_exceeded";
}  // namespace operation_codes

// How long an identity stays recoverable, from its issued_at (seconds).
inline constexpr int64_t kOperationRetentionSeconds = 24 * 3600;
// The most a keyed creation body may be.
inline constexpr size_t kMaxOperationBody = size_t(1) << 20;

// Checks `identity` against this execd's `instance_id` at `now` (Unix
// seconds), in upstream's order: shape (400), timestamp (400), instance
// (409), future (400). Returns the identity's issued_at, or the error.
std::variant<int64_t, ApiError> check_operation_identity(std::string_view identity, std::string_view instance_id,
                                                         int64_t now);

// A keyed creation body, decoded. The message of a DecodeError is one of
// upstream's fixed texts (never the body, a field name or the identity):
// "EOF", "invalid creation body", "invalid creation JSON", "operation
// creation body exceeds 1 MiB", "unexpected trailing creation data",
// "operation_id must be a nonempty string", "invalid creation fields",
// or, for a command body that decodes but does not validate, "invalid
// command request" (the route answers it without the parsing prefix).
struct KeyedCommand {
  std::string operation_id;
  CommandRequest request;  // request.id stays empty: the handle is execd's
};
struct KeyedPty {
  std::string operation_id;
  PtyCreateRequest request;
};
inline constexpr std::string_view kInvalidCommandRequest = "invalid command request";
std::variant<KeyedCommand, DecodeError> decode_keyed_command(std::string_view body);
std::variant<KeyedPty, DecodeError> decode_keyed_pty(std::string_view body);

// What PTY creation is fingerprinted by (cwd and command as asked).
std::string pty_fingerprint(const PtyCreateRequest& req);

// GET /execution/instance.
std::string execution_instance_json(std::string_view instance_id, int64_t issued_at, uint64_t capacity);
// An ExecutionOperation; `expires_at` in Unix seconds, written as RFC 3339 UTC.
std::string execution_operation_json(std::string_view id, std::string_view kind, std::string_view state,
                                     int64_t expires_at);

}  // namespace execd::protocol
