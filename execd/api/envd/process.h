// execd/api/envd/process: E2B's process.Process service (envd's
// spec/process/process.proto) over Connect: Start, Connect, List, SendInput,
// StreamInput, CloseStdin, SendSignal, Update.
//
// The processes and their table are execd/envd's (envd/processes, the
// start in envd/process_start, input in envd/process_input); what execd does
// beyond envd is said there.
#pragma once

#include "execd/envd/processes.h"
#include "execd/routes.h"

namespace execd::api {

void add_envd_process_routes(RouteTable& routes, ::execd::envd::EnvdProcesses& processes);

}  // namespace execd::api
