// execd/api/code: the code-interpreting routes: /code and /code/context
// (OpenSandbox), and E2B's code-interpreter server (POST /execute,
// /contexts...) on the E2B listeners. Thin: the contexts, their kernels and
// runs are execd/runners/code's; a run is launched as any execution
// (exec/launch, through runners/code_launch), so it has an id, resume, a
// record and a journal entry.
//
// One execution per context at a time: a second one gets 409 CONTEXT_BUSY at
// once (a kernel runs requests serially anyway; a hidden queue would make a
// client's timeout count someone else's code and hide a stuck context).
#pragma once

#include "execd/api/commands.h"
#include "execd/sessions/bash.h"
#include "execd/routes.h"
#include "execd/runners/code.h"

namespace execd::api {

void add_code_routes(RouteTable& routes, runners::CodeRegistry& code, CommandService& commands, sessions::SessionRegistry& sessions);
// E2B's code-interpreter server (POST /execute, /contexts...), on the E2B
// listeners: the same contexts and kernels, E2B's wire (protocol/e2b_code).
void add_e2b_code_routes(RouteTable& routes, runners::CodeRegistry& code, CommandService& commands);

}  // namespace execd::api
