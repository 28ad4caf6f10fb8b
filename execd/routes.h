// execd/routes: the route table and the access-token gate. Every request is
// matched once, when its head is complete: a missing token is answered
// there, before any body byte is read (the connection then closes); an
// unknown route or a wrong method is decided there and answered once the
// body is in;
// a routed, authorized request gets its handler as the exchange's
// on_complete, and a streaming route also runs its head handler then.
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

 private:
  struct Route {
    Handler handler;
    Handler head;
    bool open = false;  // no token needed (/ping)
  };
  bool authorized(const http::Exchange& ex) const;

  std::string token_;
  protocol::Router<Route> router_;
  std::vector<std::pair<std::string, Route>> prefixes_;
  Activity* activity_ = nullptr;

 public:
  // Routes that need no token (health probes carry no secret).
  void add_open(std::string method, std::string pattern, Handler h);
};

}  // namespace execd
