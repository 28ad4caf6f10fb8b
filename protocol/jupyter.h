// protocol/jupyter: the Jupyter messaging protocol (v5) as bytes, with no
// sockets: the multipart wire framing (routing identities, the <IDS|MSG>
// delimiter, the HMAC-SHA256 signature, header / parent_header / metadata /
// content, buffers), the header and request shapes execd sends, and the
// fields it reads back from replies. Frames are plain strings so the same
// code serves the kernel channels, unit tests and the fuzzer.
//
// Also here: the /code request bodies and the stream events of a code
// execution (`result`, `execution_count`, `error`, `execution_complete`),
// which sit next to protocol/envelope's stdout/stderr events.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace execd::protocol::jupyter {

inline constexpr std::string_view kDelimiter = "<IDS|MSG>";
inline constexpr std::string_view kProtocolVersion = "5.3";

// One message as it travels: the four JSON parts stay serialized text, so a
// round trip reproduces the signed bytes exactly.
struct WireMessage {
  std::vector<std::string> identities;
  std::string header = "{}";
  std::string parent_header = "{}";
  std::string metadata = "{}";
  std::string content = "{}";
  std::vector<std::string> buffers;
};

// Lowercase hex HMAC-SHA256 of the four JSON parts under `key`; empty when
// the key is empty (signing disabled, as the protocol allows).
std::string sign(std::string_view key, const WireMessage& m);

// The frames to send, signature included.
std::vector<std::string> encode(const WireMessage& m, std::string_view key);

enum class WireError { no_delimiter, truncated, bad_signature };
const char* describe(WireError e);

// Splits and verifies received frames (constant-time signature check).
std::variant<WireMessage, WireError> decode(const std::vector<std::string>& frames, std::string_view key);

// A received message viewed in place: the frames stay the receiver's (a
// kernel's print of 128 MiB is not copied to be read). The same checks as
// decode().
struct WireView {
  std::vector<std::string_view> identities;
  std::string_view header, parent_header, metadata, content;
  std::vector<std::string_view> buffers;
};
std::variant<WireView, WireError> decode_view(const std::vector<std::string_view>& frames, std::string_view key);

// What execd reads from a received message's header and parent header.
struct Envelope {
  std::string msg_type;
  std::string msg_id;
  std::string parent_msg_id;
};
// nullopt when the header or parent header is not a JSON object.
std::optional<Envelope> read_envelope(const WireMessage& m);
std::optional<Envelope> read_envelope(const WireView& m);

// A `stream` message's content: which stream, and its text. nullopt unless
// the content is an object with a `name` and a string `text`. Parsed with
// simdjson: a kernel printing as fast as it can sends little else, and this
// parse is most of what execd spends per byte of its output.
struct StreamContent {
  bool is_stderr = false;
  std::string text;
};
std::optional<StreamContent> read_stream_content(std::string_view content);

// The same, found in place for a large message: which stream, and where its
// text lies in `content`, still JSON-escaped (a small scanner: top-level
// keys, a string `name` and a string `text`; anything else is skipped).
struct StreamText {
  bool is_stderr = false;
  std::string_view escaped;
};
std::optional<StreamText> find_stream_text(std::string_view content);
// Unescapes the body of a JSON string from `pos` on, appending to `out`
// until about `max` bytes were added or the body ends (an escape is never
// split); `pos` moves past what was used. False on a malformed escape.
bool unescape_json_string(std::string_view escaped, size_t& pos, size_t max, std::string& out);

// A request from execd: a fresh header (msg_id, session, ISO 8601 date,
// protocol version) around `content`.
WireMessage make_request(std::string_view msg_type, std::string_view msg_id, std::string_view session,
                         std::string content);

// execute_request content; allow_stdin is false, so input() in user code
// raises at once in the kernel instead of waiting for an answer nobody gives.
// Silent: a helper of execd's (no execute_input, no history, no count).
std::string execute_request_content(std::string_view code, bool silent = false);

// Python code that sets environment variables in a kernel for one run and
// code that puts back what they were (E2B's run_code(envs=...)); each is
// sent as a silent execute request, around the run's own.
struct EnvScript {
  std::string apply, restore;
};
EnvScript python_env_script(const std::map<std::string, std::string>& vars);

// ---------------------------------------------------------------------------
// /code requests

struct RunCodeRequest {
  std::string code;
  std::string context_id;
  std::string language;
  std::vector<std::string> track_changes;  // roots (see protocol/track_request)
};
struct CreateContextRequest {
  std::string language;
  std::string cwd;
};
struct RequestError {
  std::string message;
};

std::variant<RunCodeRequest, RequestError> decode_run_code(std::string_view body);
std::variant<CreateContextRequest, RequestError> decode_create_context(std::string_view body);

// What execd reads of a reply's or an iopub message's content (absent
// fields empty): execute_reply (status, execution_count, and the error
// fields when status is error), status (execution_state), execute_input
// and execute_result (execution_count), error (ename, evalue, traceback).
struct KernelContent {
  std::string status, execution_state;
  std::optional<int64_t> execution_count;
  std::string ename, evalue;
  std::vector<std::string> traceback;
};
std::optional<KernelContent> read_content(std::string_view content);

// ---------------------------------------------------------------------------
// Stream events of a code execution (compact JSON objects without the
// framing's terminator; the stream adds it).

// `result` from execute_result / display_data / update_display_data: the MIME
// bundle with text/plain renamed `text`, as the SDKs read it. nullopt when
// the content has no data object.
std::optional<std::string> result_event(std::string_view content, int64_t ts_ms);
std::string execution_count_event(int64_t count, int64_t ts_ms);
std::string error_event(std::string_view ename, std::string_view evalue, const std::vector<std::string>& traceback,
                        int64_t ts_ms);
// From an `error` iopub message or an execute_reply with status error.
std::string error_event_from(const KernelContent& content, int64_t ts_ms);
// (The terminal event of a code run is protocol/envelope's, from the run's
// ExecutionResult with its status and execution count.)

}  // namespace execd::protocol::jupyter
