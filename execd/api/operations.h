// execd/api/operations: caller-bound creation, OpenSandbox PR 1771's shape
// of what POST /command's client-chosen ids already give (a lost answer
// never runs a command twice):
//   GET  /execution/instance                   this execd's instance id, the server time
//   GET  /execution/operation?kind=command|pty  a record, by X-EXECD-OPERATION-ID
//   POST /command/operations                   a command, once per identity
//   POST /pty/operations                       a PTY session, once per identity
// Thin: identities and bodies are protocol/operations', the records
// execd/exec/operations', and the runs start on the ordinary paths (the
// command's launch with the record's id as the command id; a PTY session
// under it), so every /command and /pty route serves them.
#pragma once

#include "execd/access.h"
#include "execd/api/commands.h"
#include "execd/api/pty.h"
#include "execd/context.h"
#include "execd/exec/operations.h"
#include "execd/http/exchange.h"
#include "execd/routes.h"

namespace execd::api {

struct OperationService {
  const Context& ctx;
  const Access& access;
  exec::OperationStore& store;
  CommandService& commands;
  sessions::PtyRegistry& ptys;
};

void add_operation_routes(RouteTable& routes, OperationService& svc);

// The 401 of the four routes ({"code":"UNAUTHORIZED",...}, no-store);
// false (nothing answered) for any other path.
bool respond_operations_unauthorized(http::Exchange& ex);

}  // namespace execd::api
