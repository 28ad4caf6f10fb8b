// OpenSandbox PTY WebSocket application protocol (as the Go daemon 1.0.19 speaks it): the JSON text
// frames the server sends, the binary channel prefixes and replay header, and the
// parsing of client control frames. Payloads only; wrap them with the encoders in
// protocol/websocket.h.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace execd::protocol {

// First byte of every binary message.
inline constexpr uint8_t kPtyChannelStdin = 0x00;   // client -> server
inline constexpr uint8_t kPtyChannelStdout = 0x01;  // server -> client
inline constexpr uint8_t kPtyChannelStderr = 0x02;  // server -> client, pipe mode only
inline constexpr uint8_t kPtyChannelReplay = 0x03;  // server -> client, [0x03][u64 BE offset][bytes]

// Largest stdout/stderr payload per frame sent by the reference implementation.
inline constexpr size_t kPtyOutputChunkSize = 32 * 1024;

// Close code sent to a client evicted by ?takeover=1 (reason "TAKEN_OVER").
inline constexpr uint16_t kPtyCloseTakenOver = 4001;

// Values of the "code" field of error frames.
namespace pty_error_code {
inline constexpr std::string_view start_failed = "START_FAILED";
inline constexpr std::string_view stdin_write_failed = "STDIN_WRITE_FAILED";
inline constexpr std::string_view invalid_frame = "INVALID_FRAME";
inline constexpr std::string_view already_connected = "ALREADY_CONNECTED";
inline constexpr std::string_view session_gone = "SESSION_GONE";
inline constexpr std::string_view taken_over = "TAKEN_OVER";
inline constexpr std::string_view runtime_error = "RUNTIME_ERROR";
inline constexpr std::string_view read_only = "READ_ONLY";  // stdin, resize or signal from a viewer
}  // namespace pty_error_code

// Server -> client JSON text payloads. They are byte-identical to what the Go
// implementation writes with gorilla's WriteJSON (encoding/json Encoder): field
// order of its ServerFrame struct, empty optional fields omitted, '<' '>' '&'
// U+2028 U+2029 escaped as \uXXXX, invalid UTF-8 replaced by U+FFFD, and a
// trailing '\n'.
std::string pty_connected_json(std::string_view session_id, std::string_view mode);  // "pty" | "pipe"
// A read-only viewer's: the same with "role":"viewer".
std::string pty_viewer_connected_json(std::string_view session_id, std::string_view mode);
std::string pty_exit_json(int exit_code);  // exit_code always present; -1 when killed by a signal
std::string pty_pong_json();
// An empty message or code is omitted, as Go's omitempty does.
std::string pty_error_json(std::string_view code, std::string_view message);
// execd extension: sent before the replay when `since` is older than the oldest
// retained byte: {"type":"gap","requested":N,"available_from":M}.
std::string pty_gap_json(int64_t requested, uint64_t available_from);

// The message text of the INVALID_FRAME error for an unknown client frame type:
// `unknown frame type "<t>"`, quoted like Go's %q.
std::string pty_unknown_frame_type_message(std::string_view type);

// [0x03][8-byte big-endian offset]: the first 9 bytes of a replay binary payload;
// the replayed bytes follow (e.g. the two spans of a ReplayRing slice).
std::array<uint8_t, 9> pty_replay_header(uint64_t offset);

// Client -> server text frames, decoded the way Go's json.Unmarshal fills its
// ClientFrame struct: keys match case-insensitively, the last duplicate wins,
// unknown keys are ignored, `null` leaves a field empty, and any field of the wrong
// JSON type (e.g. "cols":"80" or "cols":80.5) makes the whole frame invalid.
struct PtyStdinText {
  std::string data;  // written to stdin as is (UTF-8, no base64)
};
struct PtyResize {
  // As sent; Go applies the resize only when both are > 0 and then truncates
  // them to uint16.
  int64_t cols = 0;
  int64_t rows = 0;
  bool applies() const { return cols > 0 && rows > 0; }
};
struct PtySignal {
  std::string name;  // see pty_signal_number(); other names are ignored
};
struct PtyPing {};  // answer with pty_pong_json()
struct PtyUnknownType {
  std::string type;  // answer with INVALID_FRAME, pty_unknown_frame_type_message(type)
};
struct PtyInvalidJson {};  // silently ignored

using PtyClientText = std::variant<PtyStdinText, PtyResize, PtySignal, PtyPing, PtyUnknownType, PtyInvalidJson>;

PtyClientText parse_pty_client_text(std::string_view text);

// Client binary message: the stdin bytes of a [0x00][bytes] message; nullopt for an
// empty message or another first byte (ignored, as in Go).
std::optional<std::string_view> pty_stdin_from_binary(std::string_view message);

// SIGINT, SIGTERM, SIGKILL, SIGQUIT, SIGHUP (exact, upper case) -> signal number;
// nullopt for any other name.
std::optional<int> pty_signal_number(std::string_view name);

}  // namespace execd::protocol
