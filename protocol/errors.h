// protocol/errors: the error model. Every failure answered before a stream
// starts is an ApiError rendered as {"code":...,"message":...} (as the Go daemon renders them).
#pragma once

#include <string>
#include <string_view>

namespace execd::protocol {

namespace codes {
inline constexpr std::string_view kInvalidRequestBody = "INVALID_REQUEST_BODY";
inline constexpr std::string_view kMissingQuery = "MISSING_QUERY";
inline constexpr std::string_view kRuntimeError = "RUNTIME_ERROR";
inline constexpr std::string_view kUnauthorized = "UNAUTHORIZED";
inline constexpr std::string_view kNotFound = "NOT_FOUND";
inline constexpr std::string_view kMethodNotAllowed = "METHOD_NOT_ALLOWED";
inline constexpr std::string_view kBadRequest = "BAD_REQUEST";
inline constexpr std::string_view kPayloadTooLarge = "PAYLOAD_TOO_LARGE";
inline constexpr std::string_view kHeadersTooLarge = "HEADERS_TOO_LARGE";
inline constexpr std::string_view kRequestTimeout = "REQUEST_TIMEOUT";
inline constexpr std::string_view kFileNotFound = "FILE_NOT_FOUND";
inline constexpr std::string_view kContextNotFound = "CONTEXT_NOT_FOUND";
inline constexpr std::string_view kAlreadyConnected = "ALREADY_CONNECTED";
inline constexpr std::string_view kConflict = "CONFLICT";
inline constexpr std::string_view kUnknown = "UNKNOWN";
// Filesystem API (the Go daemon's upload codes, plus statuses the Go daemon
// reported as 500 or not at all).
inline constexpr std::string_view kInvalidFile = "INVALID_FILE";
inline constexpr std::string_view kInvalidFileContent = "INVALID_FILE_CONTENT";
inline constexpr std::string_view kInvalidFileMetadata = "INVALID_FILE_METADATA";
inline constexpr std::string_view kPermissionDenied = "PERMISSION_DENIED";
inline constexpr std::string_view kInsufficientStorage = "INSUFFICIENT_STORAGE";
inline constexpr std::string_view kRangeNotSatisfiable = "RANGE_NOT_SATISFIABLE";
inline constexpr std::string_view kBadGateway = "BAD_GATEWAY";
inline constexpr std::string_view kGatewayTimeout = "GATEWAY_TIMEOUT";
}  // namespace codes

struct ApiError {
  int status = 500;
  std::string code;
  std::string message;
};

std::string error_body(std::string_view code, std::string_view message);

// The error code execd uses for a bare protocol-level status (400, 404, 413...).
std::string_view code_for_status(int status);

}  // namespace execd::protocol
