// execd/api/api: the route groups the daemon wires up. One file per API area
// (commands, sessions, pty, files, upload, download); each decodes requests,
// calls pty/ or fs/, and encodes answers. No socket or libuv stream code here:
// responses go through http::Exchange.
#pragma once

#include "execd/context.h"
#include "execd/routes.h"

namespace execd::api {

class CommandRegistry;
class SessionRegistry;
class PtyRegistry;
class MetricsService;
class CodeRegistry;

void add_command_routes(RouteTable& routes, CommandRegistry& commands, SessionRegistry& sessions);
void add_session_routes(RouteTable& routes, SessionRegistry& sessions);
void add_pty_routes(RouteTable& routes, PtyRegistry& ptys);
void add_file_routes(RouteTable& routes, Context& ctx);
void add_upload_route(RouteTable& routes, Context& ctx);
void add_download_route(RouteTable& routes, Context& ctx);
void add_metrics_routes(RouteTable& routes, MetricsService& metrics);
void add_code_routes(RouteTable& routes, CodeRegistry& code, CommandRegistry& commands, SessionRegistry& sessions);
// DELETE /command's handler; DELETE /code?id= falls back to it for ids that
// are not code contexts, as the Go daemon's shared Interrupt does.
void interrupt_command(CommandRegistry& commands, SessionRegistry& sessions, http::Exchange& ex);

}  // namespace execd::api
