// RFC 6455 WebSocket, server side, socket-free: the opening-handshake check and
// 101 response, a push parser for client frames (with message reassembly, size
// limit and UTF-8 validation) and encoders for server frames.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace execd::protocol {

// ---------------------------------------------------------------------------
// Opening handshake
// ---------------------------------------------------------------------------

// Returns the value of a request header, looked up case-insensitively by name, or
// nullopt when absent. When a header occurs more than once the caller should join
// the values with ", " (as HTTP allows for list-valued headers). The names asked
// for are "Upgrade", "Connection", "Sec-WebSocket-Version" and "Sec-WebSocket-Key".
using HeaderLookup = std::function<std::optional<std::string_view>(std::string_view name)>;

struct HandshakeResult {
  bool accepted = false;
  // 101 when accepted; otherwise 400 (malformed upgrade), 405 (method is not GET,
  // as gorilla answers) or 426 (unsupported Sec-WebSocket-Version).
  int status = 0;
  // Why the handshake was refused (gorilla's wording, for logs); empty when accepted.
  std::string error;
  // Complete HTTP response bytes to write: the 101 response (headers only), or a
  // short text/plain error response carrying `Sec-WebSocket-Version: 13` and
  // `Connection: close` (the connection should be closed after writing it).
  std::string response;
};

// Validates an upgrade request. Checks, in gorilla's order: Connection has the
// `upgrade` token, Upgrade has the `websocket` token (both comma-separated,
// case-insensitive), method is GET, Sec-WebSocket-Version has `13`,
// Sec-WebSocket-Key base64-decodes to 16 bytes. No subprotocol, no extensions.
HandshakeResult check_websocket_upgrade(std::string_view method, const HeaderLookup& header);

// True when the request announces a WebSocket upgrade (Connection: upgrade and
// Upgrade: websocket), like gorilla's IsWebSocketUpgrade; the takeover logic needs
// it before the full check.
bool is_websocket_upgrade(const HeaderLookup& header);

// base64(SHA-1(client_key + RFC 6455 GUID)).
std::string websocket_accept_key(std::string_view client_key);

// True when the comma-separated header `value` contains `token` (case-insensitive,
// optional whitespace around items).
bool header_has_token(std::string_view value, std::string_view token);

// ---------------------------------------------------------------------------
// Frames
// ---------------------------------------------------------------------------

enum class WsOpcode : uint8_t {
  continuation = 0x0,
  text = 0x1,
  binary = 0x2,
  close = 0x8,
  ping = 0x9,
  pong = 0xA,
};

namespace ws_close {
inline constexpr uint16_t normal = 1000;
inline constexpr uint16_t going_away = 1001;
inline constexpr uint16_t protocol_error = 1002;
inline constexpr uint16_t unsupported_data = 1003;
inline constexpr uint16_t no_status = 1005;  // never sent; reported for an empty close payload
inline constexpr uint16_t abnormal = 1006;   // never sent
inline constexpr uint16_t invalid_payload = 1007;
inline constexpr uint16_t policy_violation = 1008;
inline constexpr uint16_t message_too_big = 1009;
inline constexpr uint16_t internal_error = 1011;
}  // namespace ws_close

// Whether `code` may appear in a received close frame (gorilla's rule: 1000-1003,
// 1007-1014 and 3000-4999).
bool is_valid_received_close_code(uint16_t code);

// Incremental UTF-8 validator (rejects overlongs, surrogates and > U+10FFFF), so a
// message can be checked fragment by fragment as bytes arrive.
class Utf8Validator {
 public:
  // Returns false as soon as the bytes seen so far cannot start a valid string.
  bool feed(const uint8_t* data, size_t len);
  // True when no multi-byte sequence is left unfinished.
  bool at_boundary() const { return pending_continuations_ == 0; }
  void reset() { *this = Utf8Validator{}; }

 private:
  uint8_t pending_continuations_ = 0;
  uint8_t next_min_ = 0x80;  // allowed range of the next continuation byte
  uint8_t next_max_ = 0xBF;
};

bool is_valid_utf8(std::string_view text);

struct WsEvent {
  enum class Kind { text, binary, ping, pong, close, error };
  Kind kind;
  // text/binary: the whole reassembled message; ping/pong: the control payload;
  // close: the reason; error: a human-readable description (for logs and for the
  // close frame the server should send).
  std::string payload;
  // close: the received code (1005 when the close frame had no payload);
  // error: the close code the server should send before closing (1002, 1007, 1009).
  uint16_t code = 0;
};

struct WsParserLimits {
  // Largest reassembled data message accepted; larger ones fail with 1009 as soon
  // as a frame header announces the excess, before any of it is buffered.
  size_t max_message_size = 16u << 20;
};

// Push parser for frames sent by a client. Feed bytes exactly as read from the
// socket (any split); drain the resulting events with next_event(). After a
// `close` or `error` event the parser stops and ignores further input.
class WsFrameParser {
 public:
  explicit WsFrameParser(WsParserLimits limits = {}) : limits_(limits) {}

  void feed(const uint8_t* data, size_t len);
  void feed(std::string_view bytes) {
    feed(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }

  // Moves the oldest pending event into `out`; false when there is none.
  bool next_event(WsEvent& out);
  bool has_events() const { return !events_.empty(); }

  // True after a close frame or a protocol error: nothing more will be parsed.
  bool finished() const { return state_ == State::finished; }

 private:
  enum class State { header, payload, finished };

  void start_frame_payload();
  void consume_payload(const uint8_t* data, size_t len);
  void finish_frame();
  void fail(uint16_t code, std::string reason);
  void emit(WsEvent::Kind kind, std::string payload, uint16_t code = 0);

  WsParserLimits limits_;
  State state_ = State::header;

  // Current frame header.
  uint8_t header_bytes_[14] = {};
  size_t header_have_ = 0;
  size_t header_need_ = 2;
  bool fin_ = false;
  WsOpcode opcode_ = WsOpcode::continuation;
  uint64_t payload_length_ = 0;
  uint64_t payload_received_ = 0;
  uint8_t mask_[4] = {};

  // Message being reassembled across frames (data frames only).
  bool in_message_ = false;
  WsOpcode message_opcode_ = WsOpcode::text;
  std::string message_;
  Utf8Validator message_utf8_;

  // Payload of the current control frame (at most 125 bytes).
  std::string control_;

  std::deque<WsEvent> events_;
};

// Size of the largest server frame header (no mask): 2 + 8 bytes.
inline constexpr size_t kMaxServerFrameHeaderSize = 10;

// A server frame header, built so the payload can follow it in a separate write
// buffer (scatter-gather) without being copied. `bytes` may also carry one extra
// leading payload byte (see encode_binary_header_with_prefix).
struct WsFrameHeader {
  uint8_t bytes[kMaxServerFrameHeaderSize + 1] = {};
  uint8_t size = 0;
  std::string_view view() const { return {reinterpret_cast<const char*>(bytes), size}; }
};

// Header of an unmasked server frame with FIN set (fin=false for a fragment).
WsFrameHeader encode_frame_header(WsOpcode opcode, uint64_t payload_len, bool fin = true);

// Header of a binary frame whose payload is `prefix` followed by `payload_len`
// bytes; the prefix byte is included in the returned header bytes, so the caller
// writes {header.bytes, header.size} then the payload buffer itself.
WsFrameHeader encode_binary_header_with_prefix(uint8_t prefix, uint64_t payload_len);

// Complete server frames (header + payload, one buffer).
std::string encode_text_frame(std::string_view text);
std::string encode_binary_frame(std::string_view payload);
std::string encode_binary_frame(uint8_t prefix, std::string_view payload);
// Control payloads longer than 125 bytes are truncated (RFC 6455 5.5).
std::string encode_ping_frame(std::string_view payload = {});
std::string encode_pong_frame(std::string_view payload = {});
// The reason is cut to 123 bytes at a UTF-8 boundary so the payload fits in 125.
// code 1005 (no status) produces an empty close payload.
std::string encode_close_frame(uint16_t code, std::string_view reason = {});

// A masked (client-side) frame; for tests and test clients.
std::string encode_masked_frame(WsOpcode opcode, std::string_view payload, const uint8_t mask[4],
                                bool fin = true, uint8_t rsv_bits = 0);

}  // namespace execd::protocol
