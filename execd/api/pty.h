// execd/api/pty: the /pty routes (OpenSandbox's PTY protocol, as the Go
// daemon 1.0.19 speaks it): create, status, delete, and the WebSocket
// attach of the holder or a read-only viewer. The sessions are
// execd/sessions/pty's.
#pragma once

#include "execd/routes.h"
#include "execd/sessions/pty.h"

namespace execd::api {

void add_pty_routes(RouteTable& routes, sessions::PtyRegistry& ptys);

// POST /pty/operations (execd/api/operations): a dormant session under `id`
// in `cwd` (made already), started by its first WebSocket attach, as POST
// /pty's. False when the id is taken.
bool create_pty_session(sessions::PtyRegistry& ptys, const std::string& id, const std::string& cwd,
                        const std::string& command);
// The session `id` has a process running (false: no such session, not
// started yet, or exited).
bool pty_session_running(sessions::PtyRegistry& ptys, const std::string& id);

}  // namespace execd::api
