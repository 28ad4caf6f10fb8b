// execd/runners/command_spawn: what a POST /command request becomes before
// it runs: the environment (execd's own minus its secrets, the EXECD_ENVS
// file, the request's envs), the user with its groups and home, the working
// directory ($VAR and ~ expanded with the command's own environment, then
// checked) and the program (the shell with -c, or an argv command's own,
// searched in its PATH by the child). prepare_spawn blocks
// (passwd lookups, stat, the env file): run it on the threadpool when
// needs_pool says so.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

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

// What an E2B process start (api/envd/process) becomes, as envd does it: the
// argv as given (`cmd` looked up on PATH when it has no slash), the user by
// name (empty: execd's own) with its groups, HOME, USER and LOGNAME, the
// working directory (default: the user's home, "/" if that does not
// exist; a relative one is relative to the home), and the environment:
// execd's, the EXECD_ENVS file, the request's. Blocking: threadpool only.
// Errors: 401 for an unknown user, 400 for a bad cwd or command.
struct ProcessStart {
  std::string cmd;
  std::vector<std::string> args;
  std::map<std::string, std::string> envs;
  std::optional<std::string> cwd;
  std::string user;
  bool pty = false;
  uint16_t rows = 24, cols = 80;
};
std::optional<protocol::ApiError> prepare_process_spawn(const Context& ctx, const ProcessStart& req,
                                                        pty::SpawnOptions& opts);
// Whether it blocks: a user to look up, a cwd to check, an env file to read.
// Without those (the default user's home is Context::home) it runs on the loop.
bool process_needs_pool(const Context& ctx, const ProcessStart& req);

// A user's home directory and ids by name (empty: execd's own user).
// False if there is no such user.
struct UserIds {
  uint32_t uid = 0, gid = 0;
  std::string name, home;
};
bool lookup_user(const std::string& name, UserIds& out);

}  // namespace execd::runners
