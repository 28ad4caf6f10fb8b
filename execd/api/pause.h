// execd/api/pause: pause cooperation for a control plane: is the sandbox
// idle, then freeze it, later thaw it. (Who is active is execd/activity's,
// the tracker these routes read.)
//   GET  /activity   what runs and when output, input and requests last
//                    happened, with a busy/idle verdict and its reasons
//   POST /freeze     freezes every cgroup execd made (pty/cgroup), answering
//                    once the kernel says the whole tree is frozen, or 504
//                    (and thawed again) after --freeze-timeout or ?timeout=
//   POST /thaw       undoes it
// While frozen no process starts (409 FROZEN from every route that would
// start one) and no timeout counts the frozen time. Thin: the numbers are
// the registries', the freezing is pty::Containment's.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "execd/activity.h"
#include "execd/api/code.h"
#include "execd/journal/journal.h"
#include "execd/proxy/proxy.h"
#include "execd/sessions/pty.h"
#include "execd/sessions/bash.h"
#include "execd/work_gate.h"
#include "execd/context.h"
#include "execd/exec/registry.h"
#include "execd/http/server.h"
#include "execd/routes.h"
#include "execd/watch/watch.h"
#include "pty/cgroup.h"

namespace execd::api {

struct PauseService {
  const Context& ctx;
  Activity& activity;
  exec::Registry& executions;
  journal::Journal& journal;
  sessions::SessionRegistry& sessions;
  sessions::PtyRegistry& ptys;
  runners::CodeRegistry& code;
  proxy::ProxyService& proxy;
  WorkGate& file_gate;
  watch::Hub& watches;
  pty::Containment& containment;
  http::Server& server;
};

void add_pause_routes(RouteTable& routes, PauseService& svc);

// The state directory's use against its budget, refreshed now: /activity's
// "state_dir" and the one object /metrics adds to the Go daemon's body.
nlohmann::ordered_json state_dir_json(exec::StateBudget& budget);

}  // namespace execd::api
