// execd/runners/command_spawn: what a POST /command request becomes before
// it runs: the environment (execd's own minus its secrets, the EXECD_ENVS
// file, the request's envs), the user with its groups and home, the working
// directory ($VAR and ~ expanded with the command's own environment, then
// checked) and the program (the shell with -c, or an argv command's own,
// searched in its PATH by the child). prepare_spawn blocks
// (passwd lookups, stat, the env file): run it on the threadpool when
// needs_pool says so.
#pragma once

#include <optional>

#include "execd/context.h"
#include "protocol/errors.h"
#include "protocol/requests.h"
#include "pty/spawn.h"

namespace execd::runners {

// argv[0] as Go's exec.Command finds it: a name with "/" as a path (from the
// cwd), a bare name on the PATH of `env`, tried by the child in order.
void set_argv_program(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                      pty::SpawnOptions& opts);

std::optional<protocol::ApiError> prepare_spawn(const Context& ctx, const protocol::CommandRequest& req,
                                                pty::SpawnOptions& opts);
// execd's environment for what it starts (its secrets left out) with the
// EXECD_ENVS file applied: where a bash session starts. Reads the file.
std::vector<std::string> environment_with_env_file(const Context& ctx);
// A cwd to check, a user to look up, or an env file to read.
bool needs_pool(const Context& ctx, const protocol::CommandRequest& req);

}  // namespace execd::runners
