// protocol/connect: the Connect RPC protocol (connectrpc.com/docs/protocol),
// as E2B's SDKs speak it to envd: the JSON codec over HTTP/1.1, no
// compression. Bytes only, no sockets:
//
//  * unary calls: the request body is the message itself (Content-Type
//    application/json); an error is an HTTP status plus {"code","message"};
//  * streaming calls (server, client or bidi): every message is an envelope,
//    one flags byte and a 32-bit big-endian length, then the payload
//    (Content-Type application/connect+json); the response always has status
//    200 and ends with an end-of-stream envelope (flag 0x02) whose JSON holds
//    the error, if any, and trailing metadata;
//  * the error codes, their names and the HTTP statuses of unary errors;
//  * Connect-Timeout-Ms (at most 10 digits).
//
// EnvelopeReader takes a body in pieces of any size (a socket's), bounded by
// a maximum message size, and never buffers more than one message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace execd::protocol::connect {

// The Connect error codes (the gRPC codes, named as Connect spells them).
enum class Code : uint8_t {
  ok = 0,
  canceled,
  unknown,
  invalid_argument,
  deadline_exceeded,
  not_found,
  already_exists,
  permission_denied,
  resource_exhausted,
  failed_precondition,
  aborted,
  out_of_range,
  unimplemented,
  internal,
  unavailable,
  data_loss,
  unauthenticated,
};

// "not_found"; "ok" for Code::ok.
std::string_view code_name(Code code);
std::optional<Code> code_from_name(std::string_view name);
// The HTTP status of a unary error (the protocol's table: not_found 404,
// unauthenticated 401, resource_exhausted 429, ...).
int http_status(Code code);

struct Error {
  Code code = Code::unknown;
  std::string message;
};

// {"code":"not_found","message":"..."}: a unary error body, and the "error"
// member of an end-of-stream message.
std::string error_json(const Error& error);

// --- envelopes -------------------------------------------------------------

inline constexpr uint8_t kFlagCompressed = 0x01;
inline constexpr uint8_t kFlagEndStream = 0x02;
inline constexpr size_t kEnvelopeHeader = 5;

// Appends one envelope: flags, length (big-endian), payload.
void append_envelope(std::string& out, uint8_t flags, std::string_view payload);
// For payloads written in place: begin_envelope reserves the header and
// returns where it is; finish_envelope fills in the length of what was
// appended since.
size_t begin_envelope(std::string& out, uint8_t flags);
void finish_envelope(std::string& out, size_t header_at);

// Trailing metadata of a stream: header names with their values.
using Metadata = std::vector<std::pair<std::string, std::string>>;
// The end-of-stream envelope: {} on success, {"error":{...}} on failure,
// plus "metadata" when there is any.
void append_end_stream(std::string& out, const Error* error, const Metadata& metadata = {});

// Splits an enveloped body into messages, whatever pieces it arrives in.
class EnvelopeReader {
 public:
  struct Message {
    uint8_t flags;
    std::string_view payload;  // valid during the callback only
  };
  // Returns false to stop reading (the rest of the input is ignored).
  using OnMessage = std::function<bool(const Message&)>;

  explicit EnvelopeReader(size_t max_message_bytes) : max_(max_message_bytes) {}

  // Feeds a piece of the body; messages go to `on_message` as they complete.
  // False once the body is malformed (then error() says why) or a callback
  // said stop; nothing more is read after that.
  bool feed(std::string_view data, const OnMessage& on_message);
  // The body ended: false if it ended inside an envelope.
  bool finish();
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  // Bytes of a message held while it is incomplete.
  size_t buffered() const { return buf_.size(); }

 private:
  size_t max_;
  std::string buf_;  // the header being read, then the payload
  uint8_t flags_ = 0;
  uint32_t want_ = 0;
  bool header_done_ = false, stopped_ = false;
  std::string error_;
};

// --- request heads ---------------------------------------------------------

enum class BodyKind { unary_json, stream_json, unsupported };
// From the Content-Type header: application/json (with or without a charset
// parameter) is a unary JSON call, application/connect+json a streaming one;
// anything else (the proto codec, compression we did not offer) unsupported.
BodyKind body_kind(std::string_view content_type);

// Connect-Timeout-Ms: 1 to 10 ASCII digits, else nullopt (a malformed value
// is the client's error; an absent header is no deadline).
std::optional<uint64_t> parse_timeout_ms(std::string_view value);

}  // namespace execd::protocol::connect
