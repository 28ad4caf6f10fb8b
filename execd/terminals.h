// execd/terminals: the terminal features' routes. PTY sessions (/pty, the
// OpenSandbox WebSocket protocol; terminals.cc) and bash sessions (/session,
// one long-lived shell per session streamed like /command; bash_sessions.cc).
// The registries live as long as the process.
#pragma once

#include <string>

#include "execd/context.h"
#include "execd/routes.h"

namespace execd {

// Registers /pty* and /session* on `routes`.
void register_terminals(Routes& routes, Context& ctx);

// Parts (each in its own file).
void register_pty_routes(Routes& routes, Context& ctx);
void register_bash_session_routes(Routes& routes, Context& ctx);

// SIGKILL to every process of every live session (execd exiting).
void kill_all_pty_sessions();
void kill_all_bash_sessions();
inline void kill_all_terminal_sessions() {
  kill_all_pty_sessions();
  kill_all_bash_sessions();
}

// DELETE /command?id=<session id>: stops the session's current run (the Go
// daemon deleted the whole session).
enum class InterruptResult { not_found, not_running, interrupted };
InterruptResult interrupt_bash_session_run(const std::string& session_id);

// Expands `$VAR` in a session cwd with execd's environment and creates it
// (mkdir -p, 0777 & ~umask). Empty stays empty. False with `error` set.
bool prepare_session_cwd(const Context& ctx, const std::string& in, std::string& out, std::string& error);

}  // namespace execd
