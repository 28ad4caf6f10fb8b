// execd/api/commands: the /command routes (see commands.cc for the list).
// Thin: requests are decoded by protocol/requests, commands prepared by
// runners/command_spawn, launched by runners/command_launch and run by
// runners/command, and everything about an
// execution (output, readers, stdin, status, records) is execd/exec's.
#pragma once

#include "execd/context.h"
#include "execd/exec/launch.h"
#include "execd/exec/registry.h"
#include "execd/http/exchange.h"
#include "execd/routes.h"
#include "protocol/envelope.h"
#include "protocol/requests.h"
#include "pty/runtime.h"
#include "execd/watch/watch.h"

namespace execd::sessions {
class SessionRegistry;
}

namespace execd::api {

// What the /command routes use.
struct CommandService {
  const Context& ctx;
  pty::Runtime& runtime;
  exec::Registry& executions;
  watch::Hub& watches;  // track_changes
  exec::LaunchPath& launches;
};

void add_command_routes(RouteTable& routes, CommandService& svc, sessions::SessionRegistry& sessions);
// DELETE /command's handler; DELETE /code?id= falls back to it for ids that
// are not code contexts, as the Go daemon's shared Interrupt does.
void interrupt_command(CommandService& svc, sessions::SessionRegistry& sessions, http::Exchange& ex);

// Starts a command no client asked for (a lifecycle hook): see
// runners::start_trusted_command.
bool start_trusted_command(CommandService& svc, protocol::CommandRequest req, std::string& error);

// What POST /command/operations (execd/api/operations) launches a keyed
// command with, nobody waiting for its stream: the execution `req` (whose
// id is the operation's handle) reserves, and the command's start.
exec::ExecutionSpec keyed_command_spec(const protocol::CommandRequest& req);
std::unique_ptr<exec::RunStart> keyed_command_start(CommandService& svc, protocol::CommandRequest req);

// The retained stdout and stderr of `e` from the request's ?cursor= (a
// combined byte offset, read as the Go daemon reads it), at most `max_bytes`,
// the next cursor in `cursor_header`; `truncated_header: true` when older
// bytes are no longer kept. GET /command/{id}/logs and the isolated run logs.
void respond_logs(http::Exchange& ex, exec::Execution& e, size_t max_bytes, std::string_view cursor_header,
                  std::string_view truncated_header);

// Exact framing when the server is configured for it or the client asks
// with `Accept: application/x-ndjson`.
protocol::Framing framing_for(const Context& ctx, const http::Exchange& ex);

}  // namespace execd::api
