// execd/routes: see header.
#include "execd/routes.h"

#include <spdlog/spdlog.h>

#include "execd/context.h"
#include "protocol/errors.h"
#include "protocol/sha.h"
#include "protocol/token.h"

namespace execd {

namespace codes = protocol::codes;

void RouteTable::add(std::string method, std::string pattern, Handler h) {
  router_.add(std::move(method), std::move(pattern), Route{std::move(h), nullptr, false});
}

void RouteTable::add_open(std::string method, std::string pattern, Handler h) {
  router_.add(std::move(method), std::move(pattern), Route{std::move(h), nullptr, true, true});
}

void RouteTable::add_before_binding(std::string method, std::string pattern, Handler h) {
  router_.add(std::move(method), std::move(pattern), Route{std::move(h), nullptr, false, true});
}

void RouteTable::bind(std::string token_sha256) {
  held_ = false;
  if (!token_sha256.empty()) token_sha256_ = std::move(token_sha256);
}

void RouteTable::add_open_streaming(std::string method, std::string pattern, Handler head, Handler h) {
  router_.add(std::move(method), std::move(pattern), Route{std::move(h), std::move(head), true});
}

void RouteTable::add_streaming(std::string method, std::string pattern, Handler head, Handler h) {
  router_.add(std::move(method), std::move(pattern), Route{std::move(h), std::move(head), false});
}

void RouteTable::add_prefix_streaming(std::string prefix, Handler head, Handler h) {
  prefixes_.emplace_back(std::move(prefix), Route{std::move(h), std::move(head), false});
}

bool RouteTable::authorized(const http::Exchange& ex) const {
  if (open_to_all()) return true;  // --insecure-no-auth, or held with no token yet
  for (const auto& name : token_headers_) {
    const std::string* given = ex.header(name);
    if (!given) continue;
    // A binding that gave a hash: execd never saw the token itself.
    if (!token_sha256_.empty() ? protocol::token_equal(token_sha256_, protocol::lower_hex(protocol::sha256(*given)))
                               : protocol::token_equal(token_, *given))
      return true;
  }
  return false;
}

void RouteTable::route(http::Exchange& ex) const {
  const auto& req = ex.request();
  spdlog::debug("{} {} {}", ex.peer(), req.method, req.path);
  const Route* prefix_route = nullptr;
  for (const auto& [prefix, route] : prefixes_)
    if (req.target.compare(0, prefix.size(), prefix) == 0) {
      prefix_route = &route;
      break;
    }
  protocol::Router<Route>::Match match;
  using Outcome = protocol::Router<Route>::Outcome;
  if (!prefix_route) match = router_.match(req.method, req.path);
  bool found = !prefix_route && match.outcome == Outcome::found;
  if (held_ && !(found && match.target->before_binding)) {
    // Not bound yet: nothing but /ping, /ready and /init, whoever asks.
    ex.respond_error(503, "NOT_INITIALIZED", "execd is not bound to a sandbox yet (POST /init)");
    return;
  }
  ex.authorized = authorized(ex);
  bool open = found && match.target->open;
  if (!ex.authorized && !open) {
    // Answered at once, before any body is read, and the connection closes:
    // a client without the token costs nothing beyond its request head, on
    // every route (prefix routes too: the proxy once buffered whole bodies
    // before its 401). Without the token nobody learns which routes exist.
    if (unauthorized_) return unauthorized_(ex);
    ex.respond_error(401, codes::kUnauthorized, "invalid or missing header X-EXECD-ACCESS-TOKEN");
    return;
  }
  if (activity_ && !open && req.path != "/activity" && req.path != "/freeze" && req.path != "/thaw")
    activity_->note_request(unix_ms());
  if (prefix_route) {
    ex.invite_body = true;
    ex.stream_body = true;
    ex.on_complete = prefix_route->handler;
    prefix_route->head(ex);
    return;
  }
  if (match.outcome == Outcome::not_found) {
    ex.on_complete = [](http::Exchange& e) {
      const auto& r = e.request();
      e.respond_error(404, codes::kNotFound, "no route for " + r.method + " " + r.path);
    };
    return;
  }
  if (match.outcome == Outcome::method_not_allowed) {
    ex.on_complete = [allow = match.allow](http::Exchange& e) {
      const auto& r = e.request();
      e.respond(405, "application/json; charset=utf-8",
                protocol::error_body(codes::kMethodNotAllowed, "method " + r.method + " not allowed for " + r.path),
                {"Allow: " + allow});
    };
    return;
  }
  const Route& route = *match.target;
  ex.params = std::move(match.params);
  ex.query = protocol::parse_query(req.query);
  ex.invite_body = true;
  ex.on_complete = route.handler;
  if (route.head) {
    ex.stream_body = true;
    route.head(ex);
  }
}

}  // namespace execd
