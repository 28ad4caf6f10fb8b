// execd/api/envd/connect_rpc: serving Connect RPCs (protocol/connect) on an
// http::Exchange: the route of each method (POST /<package>.<Service>/<Method>),
// the request checks every call shares (Content-Type, Connect-Timeout-Ms,
// the user of an HTTP Basic Authorization header, Keepalive-Ping-Interval),
// and, from execd/http/connect_answers, unary answers and errors and the
// head, messages and end of a server stream. The envd handlers
// (api/envd/process, api/envd/filesystem) are written against this and
// never see HTTP details.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "execd/http/connect_answers.h"
#include "execd/http/exchange.h"
#include "execd/routes.h"
#include "protocol/connect.h"

namespace execd::api::rpc {

namespace cn = protocol::connect;

// What every call carries besides its message.
struct CallInfo {
  std::string user;             // Authorization: Basic base64("user:"); empty: the default user
  uint64_t timeout_ms = 0;      // Connect-Timeout-Ms; 0: none
  uint64_t keepalive_ms = 0;    // Keepalive-Ping-Interval (seconds on the wire); 0: not asked
};

// A unary or server-streaming call whose request message is in.
using Handler = std::function<void(http::Exchange& ex, std::string_view message, const CallInfo& info)>;

// Registers a unary method: the body is the JSON message itself.
void add_unary(RouteTable& routes, const std::string& path, Handler h, RouteRules rules = {});
// Registers a server-streaming method: the body is one enveloped message;
// the handler answers with begin_stream() and stream messages, or with
// stream_error() before or after.
void add_server_stream(RouteTable& routes, const std::string& path, Handler h, RouteRules rules = {});
// Registers a client-streaming method: `head` runs when the request head is
// in (a Source then takes the enveloped body); `h` when it is complete.
void add_client_stream(RouteTable& routes, const std::string& path,
                       std::function<void(http::Exchange&, const CallInfo&)> head,
                       std::function<void(http::Exchange&)> complete, RouteRules rules = {});

// Unary answers and streams (execd/http/connect_answers).
using http::rpc::append_message;
using http::rpc::begin_stream;
using http::rpc::respond;
using http::rpc::respond_error;
using http::rpc::stream_error;

// The user named by an `Authorization: Basic` header (base64 of "user:" or
// "user:password"; the password is ignored, as envd ignores it). Empty if
// there is none; nullopt if the header is malformed.
std::optional<std::string> basic_auth_user(const std::string* header);

// The envd listener's answer to a request without the right X-Access-Token:
// 401 with a Connect error body, readable by REST clients too ("message").
void respond_unauthenticated(http::Exchange& ex);

}  // namespace execd::api::rpc
