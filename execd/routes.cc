// execd/routes: see header.
#include "execd/routes.h"

#include <spdlog/spdlog.h>

#include "execd/clock.h"
#include "protocol/errors.h"
#include "pty/cgroup.h"

namespace execd {

namespace codes = protocol::codes;

namespace {
void respond_frozen(http::Exchange& ex) {
  ex.respond_error(409, "FROZEN", "execd's processes are frozen (POST /freeze); POST /thaw first");
}
}  // namespace

void RouteTable::note(const std::string& method, const std::string& pattern, RouteRules rules) const {
  // The table as built, at debug level: tests/integration/test_security_model.py
  // probes every route it lists, so no route escapes the security tests.
  spdlog::debug("route {} {} {}{}{}{}", listener_ == Listener::execd ? "execd" : "e2b", method, pattern,
                rules.token ? " token" : " no-token", rules.while_held ? " while-held" : "",
                rules.starts_processes ? " starts-processes" : "");
}

void RouteTable::add(std::string method, std::string pattern, Handler h, RouteRules rules) {
  note(method, pattern, rules);
  router_.add(std::move(method), std::move(pattern), Route{std::move(h), nullptr, rules});
}

void RouteTable::add_streaming(std::string method, std::string pattern, Handler head, Handler h, RouteRules rules) {
  note(method, pattern, rules);
  router_.add(std::move(method), std::move(pattern), Route{std::move(h), std::move(head), rules});
}

void RouteTable::add_prefix_streaming(std::string prefix, Handler head, Handler h) {
  note("ANY", prefix + "*", {});
  prefixes_.emplace_back(std::move(prefix), Route{std::move(h), std::move(head), {}});
}

bool RouteTable::frozen() const { return containment_ && containment_->frozen(); }

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
  const RouteRules* rules = prefix_route ? &prefix_route->rules
                            : match.outcome == Outcome::found ? &match.target->rules
                                                              : nullptr;
  if (access_.held() && !(rules && rules->while_held)) {
    // Not bound yet: nothing but the probes and /init, whoever asks.
    ex.respond_error(503, "NOT_INITIALIZED", "execd is not initialized yet: POST /internal/init must be called first");
    return;
  }
  ex.authorized = access_.authorized(listener_, ex);
  bool needs_token = !rules || rules->token;
  if (!ex.authorized && needs_token) {
    // Answered at once, before any body is read, and the connection closes:
    // a client without the token costs nothing beyond its request head, on
    // every route (prefix routes too: the proxy once buffered whole bodies
    // before its 401). Without the token nobody learns which routes exist.
    if (unauthorized_) return unauthorized_(ex);
    ex.respond_error(401, codes::kUnauthorized, "invalid or missing header X-EXECD-ACCESS-TOKEN");
    return;
  }
  if (activity_ && needs_token && req.path != "/activity" && req.path != "/freeze" && req.path != "/thaw")
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
  if (route.rules.starts_processes) {
    // Refused at the head (no body is read), and again once the body is in:
    // a freeze that came while it arrived holds too.
    if (frozen()) return respond_frozen(ex);
    ex.on_complete = [this, &route](http::Exchange& e) {
      if (frozen()) return respond_frozen(e);
      route.handler(e);
    };
  } else {
    ex.on_complete = route.handler;
  }
  if (route.head) {
    ex.stream_body = true;
    route.head(ex);
  }
}

}  // namespace execd
