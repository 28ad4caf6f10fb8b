// execd/http/connect_answers: writing Connect (protocol/connect) answers on
// an http::Exchange: a unary answer or error, and the head, messages and end
// of a server stream. What the envd handlers (api/envd) answer with, and
// what the E2B streams that outlive a handler (execd/envd: a WatchDir
// stream, a StreamInput body, a refused Start) write as they go; routing a
// call to its handler is api/envd/connect_rpc's.
#pragma once

#include <string>
#include <string_view>

#include "execd/http/exchange.h"
#include "protocol/connect.h"

namespace execd::http::rpc {

namespace cn = protocol::connect;

// Unary answers.
void respond(http::Exchange& ex, std::string_view json);
void respond_error(http::Exchange& ex, const cn::Error& e);

// Streams: the 200 head (Content-Type application/connect+json), messages,
// and the end-of-stream message.
void begin_stream(http::Exchange& ex);
// A whole streaming response that is only an error (before anything was sent).
void stream_error(http::Exchange& ex, const cn::Error& e);
// Appends one message envelope around what `write` appends.
template <class Fn>
void append_message(std::string& out, Fn write) {
  size_t at = cn::begin_envelope(out, 0);
  write(out);
  cn::finish_envelope(out, at);
}

}  // namespace execd::http::rpc
