// protocol/e2b_code: the wire of E2B's code-interpreter server (the FastAPI
// app of e2b-dev/code-interpreter on port 49999), as its SDK
// (e2b-code-interpreter) speaks it: POST /execute bodies, POST /contexts
// bodies, and the NDJSON lines an execution streams back:
//   {"type":"stdout"|"stderr","text":...,"timestamp":<ns>}
//   {"type":"result","text":...,"html":...,"png":...,"is_main_result":true,"extra":{...}}
//   {"type":"error","name":...,"value":...,"traceback":"..."}
//   {"type":"number_of_executions","execution_count":N}
//   {"type":"keepalive"}
//   {"type":"end_of_execution"}
// Results and errors are translated from the events execd keeps for a code
// run (protocol/jupyter's result/error/execution_count events), so the
// E2B stream and the OpenSandbox one come from the same retained log.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "protocol/requests.h"

namespace execd::protocol::e2b_code {

struct ExecuteRequest {
  std::string code;
  std::optional<std::string> context_id, language;
  std::map<std::string, std::string> env_vars;
};
std::variant<ExecuteRequest, DecodeError> decode_execute(std::string_view body);

struct CreateContextRequest {
  std::optional<std::string> language, cwd;
};
std::variant<CreateContextRequest, DecodeError> decode_create_context(std::string_view body);

// As the server normalizes: trimmed, lowercase; "" python, "js" javascript,
// "ts" typescript.
std::string normalize_language(std::string_view language);

void append_stream_line(std::string& out, bool is_stderr, std::string_view text, int64_t ts_ns);
void append_error_line(std::string& out, std::string_view name, std::string_view value, std::string_view traceback);
void append_keepalive_line(std::string& out);
void append_end_line(std::string& out);

// Translates one of execd's stored code-run events into E2B's line:
// execution_count -> number_of_executions (and the next result is the main
// one), result -> result (MIME bundle keys to E2B's names, the rest under
// "extra"), error -> error (traceback joined). Other events write nothing.
// `main_pending` carries "an execution_count came first" between calls.
void translate_event(std::string& out, std::string_view event_json, bool& main_pending);

// {"id":...,"language":...,"cwd":...}
std::string context_json(std::string_view id, std::string_view language, std::string_view cwd);

}  // namespace execd::protocol::e2b_code
