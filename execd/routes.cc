// execd/routes: see header.
#include "execd/routes.h"

#include <spdlog/spdlog.h>

#include "protocol/errors.h"
#include "protocol/token.h"

namespace execd {

namespace codes = protocol::codes;
using protocol::HttpRequest;
using protocol::QueryParams;
using protocol::RouteParams;

Routes::Routes(Context& ctx, CommandRegistry& commands) : ctx_(ctx), commands_(commands) {
  for (const char* method : {"GET", "HEAD"})
    add(method, "/ping", [](Connection& c, HttpRequest&, const RouteParams&, const QueryParams&) {
      c.respond_empty(200);
    });
  add("POST", "/command", [this](Connection& c, HttpRequest& r, const RouteParams&, const QueryParams&) {
    handle_command_run(commands_, c, r);
  });
  add("DELETE", "/command", [this](Connection& c, HttpRequest&, const RouteParams&, const QueryParams& q) {
    handle_command_interrupt(commands_, c, q);
  });
  add("GET", "/command/status/:id", [this](Connection& c, HttpRequest&, const RouteParams& p, const QueryParams&) {
    handle_command_status(commands_, c, p.get("id"));
  });
  add("GET", "/command/:id/logs", [this](Connection& c, HttpRequest&, const RouteParams& p, const QueryParams& q) {
    handle_command_logs(commands_, c, p.get("id"), q);
  });
}

protocol::BodyMode Routes::head(Connection& conn, HttpRequest& req) {
  // Only an authorized request to a streaming route gets its body streamed;
  // everything else is buffered (within the body limit) and answered by
  // dispatch() once complete.
  auto match = router_.match(req.method, req.path);
  if (match.outcome != protocol::Router<Route>::Outcome::found || !authorized(req)) return protocol::BodyMode::buffer;
  if (!match.target->head) {
    // curl asks before sending a body over 1 KiB; without an answer it
    // waits a second. Requests that will be refused get no invitation.
    const std::string* expect = req.header("expect");
    if (expect && protocol::equals_ignoring_ascii_case(*expect, "100-continue"))
      conn.write_raw("HTTP/1.1 100 Continue\r\n\r\n");
    return protocol::BodyMode::buffer;
  }
  QueryParams query = protocol::parse_query(req.query);
  match.target->head(conn, req, match.params, query);
  return protocol::BodyMode::stream;
}

bool Routes::authorized(const HttpRequest& req) const {
  if (ctx_.config.access_token.empty()) return true;  // --insecure-no-auth
  const std::string* given = req.header("x-execd-access-token");
  return given && protocol::token_equal(ctx_.config.access_token, *given);
}

void Routes::dispatch(Connection& conn, HttpRequest& req) {
  spdlog::debug("{} {} {}", conn.peer(), req.method, req.path);
  // /ping stays open so that health probes need no secret.
  bool is_ping = req.path == "/ping" && (req.method == "GET" || req.method == "HEAD");
  if (!is_ping && !authorized(req)) {
    conn.respond_error(401, codes::kUnauthorized, "invalid or missing header X-EXECD-ACCESS-TOKEN");
    return;
  }
  auto match = router_.match(req.method, req.path);
  if (match.outcome == protocol::Router<Route>::Outcome::not_found) {
    conn.respond_error(404, codes::kNotFound, "no route for " + req.method + " " + req.path);
    return;
  }
  if (match.outcome == protocol::Router<Route>::Outcome::method_not_allowed) {
    conn.respond(405, "application/json; charset=utf-8",
                 protocol::error_body(codes::kMethodNotAllowed, "method " + req.method + " not allowed for " + req.path),
                 {"Allow: " + match.allow});
    return;
  }
  QueryParams query = protocol::parse_query(req.query);
  match.target->handler(conn, req, match.params, query);
}

}  // namespace execd
