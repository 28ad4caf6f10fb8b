// execd/runners/command_launch: what a command brings to a launch
// (exec/launch), for POST /command and for the lifecycle hooks: its spec,
// its preparation (the environment, the user, the working directory:
// blocking when runners::needs_pool says so), its stream in the client's
// framing, and the command runner (runners/command).
#pragma once

#include <memory>
#include <string>

#include "execd/context.h"
#include "execd/exec/launch.h"
#include "protocol/envelope.h"
#include "protocol/requests.h"
#include "pty/runtime.h"

namespace execd::runners {

// The execution a start request reserves (kind command).
exec::ExecutionSpec command_spec(const protocol::CommandRequest& req, std::string fingerprint);

// The start of `req`, streamed to its client in `framing`.
std::unique_ptr<exec::RunStart> command_start(const Context& ctx, pty::Runtime& runtime, protocol::CommandRequest req,
                                              protocol::Framing framing);

// Starts a command no client asked for (a lifecycle hook), in the
// background, recorded and journaled like any; `req.id` names it. False
// with `error` when it cannot even be created (execd is stopping, the id is
// taken); a start that fails later is the execution's own result.
bool start_trusted_command(const Context& ctx, pty::Runtime& runtime, exec::LaunchPath& launches,
                           protocol::CommandRequest req, std::string& error);

}  // namespace execd::runners
