// protocol/envd: the messages of E2B's envd services (process.Process and
// filesystem.Filesystem, spec/process/process.proto and
// spec/filesystem/filesystem.proto of e2b-dev/infra) in the proto3 JSON
// mapping (protobuf.dev/programming-guides/json), which is what the Connect
// JSON codec carries:
//
//  * field names: the lowerCamelCase JSON name is written; both it and the
//    proto name (include_entry) are read;
//  * bytes are base64 (written standard with padding; read standard or
//    URL-safe, padded or not);
//  * enums by name (FILE_TYPE_FILE); names or numbers are read;
//  * 64-bit integers are written as strings ("size":"1024"); 32-bit ones as
//    numbers; either form is read;
//  * fields at their default value are left out when written (as envd's
//    protojson does), and null reads as the default;
//  * a oneof with more than one member set is an error; unknown fields are
//    ignored.
//
// Decoders return the request or a DecodeError worded for a Connect
// invalid_argument; encoders append to a caller-owned string. No sockets, no
// files: the handlers are execd/api/envd_*.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <ctime>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "protocol/requests.h"

namespace execd::protocol::envd {

// The envd release whose API execd serves, sent as X-Envd-Version on
// GET /health for the control plane in front of execd to hand to the SDKs
// as `envdVersion` (their version gates choose paths by it; envd itself
// sends the header on its /init answer). 0.6.13 (infra main 54693ff3) is
// the newest release whose source could be read and checked; SendSignal's
// `descendants` from envd 0.7.1 (infra PR 3617, open) is served too, but
// what else 0.7.x changed could not be read, so execd does not claim it.
inline constexpr const char* kEnvdVersion = "0.6.13";

// --- process.Process requests ----------------------------------------------

struct PtySize {
  uint32_t cols = 0, rows = 0;
};

// Which process: by pid or by the tag it was started with (oneof selector).
struct ProcessSelector {
  std::optional<uint32_t> pid;
  std::optional<std::string> tag;
};

struct ProcessConfig {
  std::string cmd;
  std::vector<std::string> args;
  std::map<std::string, std::string> envs;
  std::optional<std::string> cwd;
};

struct StartRequest {
  ProcessConfig process;
  std::optional<PtySize> pty;
  std::optional<std::string> tag;
  // Absent means open, as envd: only stdin:false closes it.
  std::optional<bool> stdin_open;
};

// ConnectRequest, CloseStdinRequest: {"process": selector}.
struct SelectorRequest {
  ProcessSelector process;
};

struct UpdateRequest {
  ProcessSelector process;
  std::optional<PtySize> pty;
};

// ProcessInput: oneof stdin / pty, both bytes.
struct ProcessInput {
  enum class Kind : uint8_t { none, stdin_bytes, pty_bytes };
  Kind kind = Kind::none;
  std::string data;
};

struct SendInputRequest {
  ProcessSelector process;
  ProcessInput input;
};

struct SendSignalRequest {
  ProcessSelector process;
  int signal = 0;  // SIGNAL_UNSPECIFIED 0, SIGNAL_SIGTERM 15, SIGNAL_SIGKILL 9
  // Field 3 (e2b-dev/infra PR 3617, envd 0.7.1): the signal goes to the
  // process's group, not only to its leader. Absent = false.
  bool descendants = false;
};

// One message of StreamInput's request stream.
struct StreamInputEvent {
  enum class Kind : uint8_t { none, start, data, keepalive };
  Kind kind = Kind::none;
  ProcessSelector process;  // start
  ProcessInput input;       // data
};

std::variant<StartRequest, DecodeError> decode_start(std::string_view json);
std::variant<SelectorRequest, DecodeError> decode_selector_request(std::string_view json);
std::variant<UpdateRequest, DecodeError> decode_update(std::string_view json);
std::variant<SendInputRequest, DecodeError> decode_send_input(std::string_view json);
std::variant<SendSignalRequest, DecodeError> decode_send_signal(std::string_view json);
std::variant<StreamInputEvent, DecodeError> decode_stream_input(std::string_view json);
// ListRequest has no fields: any JSON object.
std::optional<DecodeError> decode_empty(std::string_view json);

// --- process.Process responses (each a StartResponse / ConnectResponse:
// {"event": ProcessEvent}) -------------------------------------------------

enum class DataStream : uint8_t { stdout_bytes, stderr_bytes, pty_bytes };

struct EndEvent {
  int32_t exit_code = 0;
  bool exited = false;
  std::string status;                // Go's ProcessState.String(): "exit status 1", "signal: killed"
  std::optional<std::string> error;  // present unless the process exited 0
};

void append_start_event(std::string& out, uint32_t pid);
void append_data_event(std::string& out, DataStream s, const uint8_t* data, size_t len);
void append_end_event(std::string& out, const EndEvent& end);
void append_keepalive_event(std::string& out);

struct ProcessInfo {
  ProcessConfig config;
  uint32_t pid = 0;
  std::optional<std::string> tag;
};
// ListResponse: {"processes":[...]}.
std::string list_response(const std::vector<ProcessInfo>& processes);

// --- filesystem.Filesystem -------------------------------------------------

// StatRequest, MakeDirRequest, RemoveRequest: {"path"}.
struct PathRequest {
  std::string path;
};
struct MoveRequest {
  std::string source, destination;
};
struct ListDirRequest {
  std::string path;
  uint32_t depth = 0;
};
// WatchDirRequest and CreateWatcherRequest.
struct WatchRequest {
  std::string path;
  bool recursive = false, include_entry = false, allow_network_mounts = false;
};
// GetWatcherEventsRequest, RemoveWatcherRequest.
struct WatcherIdRequest {
  std::string watcher_id;
};

std::variant<PathRequest, DecodeError> decode_path_request(std::string_view json);
std::variant<MoveRequest, DecodeError> decode_move(std::string_view json);
std::variant<ListDirRequest, DecodeError> decode_list_dir(std::string_view json);
std::variant<WatchRequest, DecodeError> decode_watch(std::string_view json);
std::variant<WatcherIdRequest, DecodeError> decode_watcher_id(std::string_view json);

enum class FileType : uint8_t { unspecified = 0, file = 1, directory = 2, symlink = 3 };
enum class EventType : uint8_t { unspecified = 0, create = 1, write = 2, remove = 3, rename = 4, chmod = 5 };
std::string_view file_type_name(FileType t);
std::string_view event_type_name(EventType t);

struct EntryInfo {
  std::string name;
  FileType type = FileType::unspecified;  // a symlink's target type (is_symlink says it is a link)
  std::string path;
  int64_t size = 0;
  uint32_t mode = 0;        // permission bits (of the target, for a symlink)
  std::string permissions;  // Go's FileMode.String() of the entry itself ("Lrwxrwxrwx")
  std::string owner, group;
  std::optional<timespec> modified;
  std::optional<std::string> symlink_target;
  bool is_symlink = false;
  std::map<std::string, std::string> metadata;
};

void append_entry_info(std::string& out, const EntryInfo& e);
// A file's metadata (EntryInfo.metadata, an upload answer's "metadata"):
// a JSON object of strings.
void append_metadata(std::string& out, const std::map<std::string, std::string>& metadata);
// {"entry":{...}}: StatResponse, MakeDirResponse, MoveResponse.
std::string entry_response(const EntryInfo& e);
// {"entries":[...]}
std::string list_dir_response(const std::vector<EntryInfo>& entries);

struct FsEvent {
  std::string name;  // relative to the watched directory
  EventType type = EventType::unspecified;
  std::optional<EntryInfo> entry;
};
void append_fs_event(std::string& out, const FsEvent& e);
// WatchDirResponse messages: {"start":{}}, {"filesystem":{...}}, {"keepalive":{}}.
void append_watch_start(std::string& out);
void append_watch_event(std::string& out, const FsEvent& e);
void append_watch_keepalive(std::string& out);
// {"watcherId":"..."}
std::string create_watcher_response(std::string_view id);
// {"events":[...]}
std::string watcher_events_response(const std::vector<FsEvent>& events);

// --- shared pieces ---------------------------------------------------------

// Go's os.FileMode.String() of an st_mode: "-rw-r--r--", "drwxr-xr-x",
// "Lrwxrwxrwx", "Dcrw-rw-rw-", "urwsr-xr-x" is written "urwxr-xr-x".
std::string go_file_mode_string(mode_t st_mode);
// google.protobuf.Timestamp in JSON: UTC, 0, 3, 6 or 9 fractional digits.
std::string timestamp_json(const timespec& ts);
// proto3 JSON bytes: standard or URL-safe alphabet, padding optional.
std::optional<std::string> decode_proto_bytes(std::string_view text);

}  // namespace execd::protocol::envd
