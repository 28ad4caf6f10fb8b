// execd/api/pty: the /pty routes (OpenSandbox's PTY protocol, as the Go
// daemon 1.0.19 speaks it): create, status, delete, and the WebSocket
// attach of the holder or a read-only viewer. The sessions are
// execd/sessions/pty's.
#pragma once

#include "execd/routes.h"
#include "execd/sessions/pty.h"

namespace execd::api {

void add_pty_routes(RouteTable& routes, sessions::PtyRegistry& ptys);

}  // namespace execd::api
