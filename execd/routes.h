// execd/routes: a listener's route table, and the gates every request
// passes, in one place and one order, when its head is complete:
//   1. held: a warm-pool execd (--runtime-init) answers only the routes
//      marked while_held until POST /init binds it (503 NOT_INITIALIZED,
//      before the token is looked at), on every listener;
//   2. the token: execd/access decides for the table's listener; a request
//      without it is answered there, before any body byte is read (the
//      connection then closes);
//   3. freezing: a route that starts or feeds a process is 409 FROZEN while
//      execd's processes are frozen (POST /freeze), checked again when the
//      body is in.
// An unknown route or a wrong method is decided then and answered once the
// body is in; a routed request gets its handler as the exchange's
// on_complete, and a streaming route also runs its head handler at once.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "execd/access.h"
#include "execd/activity.h"
#include "execd/http/exchange.h"
#include "protocol/router.h"

namespace execd::pty {
class Containment;
}

namespace execd {

using Handler = std::function<void(http::Exchange&)>;

// What a route asks of a request before its handler runs.
struct RouteRules {
  bool token = true;              // the listener's credential (execd/access)
  bool while_held = false;        // answers before POST /init binds execd
  bool starts_processes = false;  // starts or feeds a process: refused while frozen
};
// Health probes: no token, and they answer while held (/ping, /ready, /health).
inline constexpr RouteRules kProbe{false, true, false};
// Routes that check a credential of their own (E2B's signed file URLs).
inline constexpr RouteRules kSelfChecked{false, false, false};
inline constexpr RouteRules kStartsProcesses{true, false, true};

class RouteTable {
 public:
  // `unauthorized` answers a request without the token (null: execd's 401).
  RouteTable(const Access& access, Listener listener, Handler unauthorized = nullptr)
      : access_(access), listener_(listener), unauthorized_(std::move(unauthorized)) {}

  void add(std::string method, std::string pattern, Handler h, RouteRules rules = {});
  // The body is streamed: `head` runs when the headers are complete and
  // attaches a Source that takes the body (on_body); `h` runs at the end.
  void add_streaming(std::string method, std::string pattern, Handler head, Handler h, RouteRules rules = {});
  // Every method and every raw request target starting with `prefix` (the
  // proxy: the rest of the target is forwarded as it came, never decoded).
  // Streaming like add_streaming; checked before the pattern routes.
  void add_prefix_streaming(std::string prefix, Handler head, Handler h);
  // Routes `ex` (called at head time).
  void route(http::Exchange& ex) const;
  // Authorized requests are noted there (GET /activity), except the
  // control plane's own polling: /ping, /activity, /freeze, /thaw.
  void set_activity(Activity* a) { activity_ = a; }
  // Where freezing is read (routes with starts_processes).
  void set_containment(const pty::Containment* c) { containment_ = c; }

 private:
  struct Route {
    Handler handler;
    Handler head;
    RouteRules rules;
  };
  bool frozen() const;
  void note(const std::string& method, const std::string& pattern, RouteRules rules) const;

  const Access& access_;
  Listener listener_;
  Handler unauthorized_;
  protocol::Router<Route> router_;
  std::vector<std::pair<std::string, Route>> prefixes_;
  Activity* activity_ = nullptr;
  const pty::Containment* containment_ = nullptr;
};

}  // namespace execd
