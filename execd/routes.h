// execd/routes: the route table and the access-token gate. Every request is
// matched once, when its head is complete: a missing token is answered
// there, before any body byte is read (the connection then closes); an
// unknown route or a wrong method is decided there and answered once the
// body is in;
// a routed, authorized request gets its handler as the exchange's
// on_complete, and a streaming route also runs its head handler then.
// A warm-pool execd (--runtime-init) is held: until bind(), only open routes
// and those added with add_before_binding answer, everything else is 503
// before the token is looked at; a binding may replace the token by its
// SHA-256, against which every later request's token is checked.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "execd/activity.h"
#include "execd/http/exchange.h"
#include "protocol/router.h"

namespace execd {

using Handler = std::function<void(http::Exchange&)>;

class RouteTable {
 public:
  // `token` empty: no authorization (--insecure-no-auth).
  explicit RouteTable(std::string token) : token_(std::move(token)) {}
  // A table whose token travels in other headers (lowercase names, any of
  // them may carry it) and whose 401 is answered by `unauthorized` (the
  // envd listener: X-Access-Token, Connect's error shape).
  RouteTable(std::string token, std::vector<std::string> token_headers, Handler unauthorized)
      : token_(std::move(token)), token_headers_(std::move(token_headers)), unauthorized_(std::move(unauthorized)) {}

  void add(std::string method, std::string pattern, Handler h);
  // The body is streamed: `head` runs when the headers are complete and
  // attaches a Source that takes the body (on_body); `h` runs at the end.
  void add_streaming(std::string method, std::string pattern, Handler head, Handler h);
  // Every method and every raw request target starting with `prefix` (the
  // proxy: the rest of the target is forwarded as it came, never decoded).
  // Streaming like add_streaming; checked before the pattern routes.
  void add_prefix_streaming(std::string prefix, Handler head, Handler h);
  // Routes `ex` (called at head time).
  void route(http::Exchange& ex) const;
  // Authorized requests are noted there (GET /activity), except the
  // control plane's own polling: /ping, /activity, /freeze, /thaw.
  void set_activity(Activity* a) { activity_ = a; }

  // --runtime-init: hold every route but the open ones and those below.
  void hold_until_bound() { held_ = true; }
  // Answers even while held (POST /init); needs the token if execd has one.
  void add_before_binding(std::string method, std::string pattern, Handler h);
  // POST /init bound execd; `token_sha256` (64 lowercase hex digits, or
  // empty to keep the token execd has) checks tokens from now on.
  void bind(std::string token_sha256);
  bool held() const { return held_; }
  // No token at all: every request is authorized (--insecure-no-auth).
  bool open_to_all() const { return token_.empty() && token_sha256_.empty(); }

 private:
  struct Route {
    Handler handler;
    Handler head;
    bool open = false;  // no token needed (/ping)
    bool before_binding = false;  // answers while held (open ones too)
  };
  bool authorized(const http::Exchange& ex) const;

  std::string token_;
  std::vector<std::string> token_headers_{"x-execd-access-token"};
  Handler unauthorized_;
  std::string token_sha256_;  // set by bind(): checked instead of token_
  bool held_ = false;
  protocol::Router<Route> router_;
  std::vector<std::pair<std::string, Route>> prefixes_;
  Activity* activity_ = nullptr;

 public:
  // Routes that need no token (health probes carry no secret), or that
  // check it themselves (E2B's /files also takes a signed URL).
  void add_open(std::string method, std::string pattern, Handler h);
  void add_open_streaming(std::string method, std::string pattern, Handler head, Handler h);
};

}  // namespace execd
