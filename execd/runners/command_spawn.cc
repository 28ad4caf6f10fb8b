// execd/runners/command_spawn: see header.
#include "execd/runners/command_spawn.h"

#include <sys/stat.h>
#include <unistd.h>

#include "fs/accounts.h"
#include "fs/env_file.h"
#include "fs/expand.h"
#include "fs/small_file.h"
#include "protocol/errors.h"

namespace execd::runners {

using protocol::ApiError;
namespace codes = protocol::codes;

namespace {

// EXECD_ENVS (fs/env_file), re-read for every command.
void apply_env_file(const std::string& path, std::vector<std::string>& env) {
  const std::string text = fs::read_small_file(path).value_or(std::string());
  fs::parse_env_file(
      text, [&](std::string_view n) { return env_lookup(env, n); },
      [&](const std::string& k, const std::string& v) { pty::set_env(env, k, v); });
}

}  // namespace

// argv[0] with a slash is a path (a relative one from the command's cwd);
// a bare name is searched in the absolute entries of the command's own PATH
// (a relative entry would make the lookup depend on the cwd: skipped, as
// Go's os/exec refuses it). The child does the search, as the command's user.
void set_argv_program(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                      pty::SpawnOptions& opts) {
  const std::string& name = argv[0];
  opts.argv = argv;
  opts.lookup_name = name;
  if (name.find('/') != std::string::npos) {
    opts.program = name;
    return;
  }
  const char* path = env_lookup(env, "PATH");
  std::string_view p = path ? path : "";
  while (!p.empty()) {
    size_t colon = p.find(':');
    std::string_view dir = p.substr(0, colon);
    if (!dir.empty() && dir[0] == '/') opts.search.push_back(std::string(dir) + "/" + name);
    p = colon == std::string_view::npos ? std::string_view() : p.substr(colon + 1);
  }
}

std::vector<std::string> environment_with_env_file(const Context& ctx) {
  std::vector<std::string> env = ctx.child_env();
  if (const char* envs_file = env_lookup(ctx.base_env, "EXECD_ENVS"); envs_file && *envs_file)
    apply_env_file(envs_file, env);
  ctx.seal_env(env);
  return env;
}

bool lookup_user(const std::string& name, UserIds& out) {
  std::optional<fs::Account> found = name.empty() ? fs::account_with_uid(getuid()) : fs::account_named(name);
  if (!found) {
    if (!name.empty()) return false;
    // execd's own user without a passwd entry (a bare container).
    out.uid = getuid();
    out.gid = getgid();
    out.name = std::to_string(out.uid);
    const char* home = getenv("HOME");
    out.home = home && *home ? home : "/";
    return true;
  }
  out.uid = found->uid;
  out.gid = found->gid;
  out.name = found->name;
  out.home = found->home.empty() ? "/" : found->home;
  return true;
}

std::optional<ApiError> prepare_process_spawn(const Context& ctx, const ProcessStart& req, pty::SpawnOptions& opts) {
  std::vector<std::string> env = environment_with_env_file(ctx);
  UserIds user;
  if (req.user.empty()) {
    user.home = ctx.home.empty() ? "/" : ctx.home;  // execd's own user: nothing to look up
  } else if (!lookup_user(req.user, user)) {
    return ApiError{401, std::string(codes::kUnauthorized), "error looking up user '" + req.user + "': unknown user"};
  }
  if (!req.user.empty()) {
    // As the user: its ids and groups, and the variables a login sets.
    opts.uid = user.uid;
    opts.gid = user.gid;
    opts.groups = fs::groups_of(user.name, user.gid);
    pty::set_env(env, "HOME", user.home);
    pty::set_env(env, "USER", user.name);
    pty::set_env(env, "LOGNAME", user.name);
  }
  for (const auto& [k, v] : req.envs) pty::set_env(env, k, v);
  ctx.seal_env(env);

  struct stat st;
  std::string cwd;
  if (req.cwd && !req.cwd->empty()) {
    cwd = *req.cwd;
    if (cwd[0] == '~' && (cwd.size() == 1 || cwd[1] == '/')) cwd = user.home + cwd.substr(1);
    else if (cwd[0] != '/') cwd = user.home + "/" + cwd;
    if (stat(cwd.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return ApiError{400, std::string(codes::kInvalidRequestBody), "working directory does not exist or is not a directory: " + cwd};
  } else if (req.user.empty()) {
    cwd = user.home;  // checked at start (Context::home)
  } else {
    cwd = stat(user.home.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? user.home : "/";
  }
  opts.cwd = cwd;

  if (req.cmd.empty()) return ApiError{400, std::string(codes::kInvalidRequestBody), "process.cmd is empty"};
  opts.program = req.cmd.find('/') == std::string::npos ? pty::find_in_path(req.cmd) : req.cmd;
  if (opts.program.empty())
    return ApiError{400, std::string(codes::kInvalidRequestBody), "executable file not found in $PATH: " + req.cmd};
  opts.argv = {req.cmd};
  opts.argv.insert(opts.argv.end(), req.args.begin(), req.args.end());
  opts.env = std::move(env);
  opts.use_pty = req.pty;
  opts.rows = req.rows;
  opts.cols = req.cols;
  return std::nullopt;
}

bool process_needs_pool(const Context& ctx, const ProcessStart& req) {
  const char* envs_file = env_lookup(ctx.base_env, "EXECD_ENVS");
  return !req.user.empty() || (req.cwd && !req.cwd->empty()) || (envs_file && *envs_file);
}

std::optional<ApiError> prepare_spawn(const Context& ctx, const protocol::CommandRequest& req, pty::SpawnOptions& opts) {
  std::vector<std::string> env = environment_with_env_file(ctx);

  if (req.uid) {
    std::optional<fs::Account> found = fs::account_with_uid(*req.uid);
    gid_t gid = req.gid ? *req.gid : (found ? found->gid : static_cast<gid_t>(*req.uid));
    opts.uid = *req.uid;
    opts.gid = gid;
    if (found) {
      opts.groups = fs::groups_of(found->name, gid);
      pty::set_env(env, "HOME", found->home);
      pty::set_env(env, "USER", found->name);
      pty::set_env(env, "LOGNAME", found->name);
    } else {
      // No passwd entry: no supplementary groups, and never root's group by
      // accident (the Go daemon ran such commands with gid 0).
      opts.groups = {gid};
      pty::set_env(env, "HOME", "/");
    }
  }
  for (const auto& [k, v] : req.envs) pty::set_env(env, k, v);
  ctx.seal_env(env);

  if (!req.cwd.empty()) {
    // Expanded with the same variables the command will see (the Go daemon
    // validated with one set and ran with another).
    std::string cwd, err;
    auto lookup = [&](std::string_view n) { return env_lookup(env, n); };
    if (!fs::expand_vars(req.cwd, lookup, cwd, err, false)) {
      return ApiError{400, std::string(codes::kInvalidRequestBody), "invalid request, validation error: " + err};
    }
    if (!cwd.empty() && cwd[0] == '~' && (cwd.size() == 1 || cwd[1] == '/')) {
      const char* home = env_lookup(ctx.base_env, "HOME");
      cwd = std::string(home ? home : "/") + cwd.substr(1);
    }
    struct stat st;
    if (stat(cwd.c_str(), &st) != 0) {
      return ApiError{400, std::string(codes::kInvalidRequestBody),
                      "invalid request, validation error: working directory does not exist: " + cwd};
    }
    if (!S_ISDIR(st.st_mode)) {
      return ApiError{400, std::string(codes::kInvalidRequestBody),
                      "invalid request, validation error: working directory is not a directory: " + cwd};
    }
    opts.cwd = cwd;
  }
  if (req.argv.empty()) {
    opts.program = ctx.shell;
    opts.argv = {ctx.shell, "-c", req.command};
  } else {
    set_argv_program(req.argv, env, opts);
  }
  opts.env = std::move(env);
  opts.use_pty = req.tty;
  opts.rows = req.rows;
  opts.cols = req.cols;
  return std::nullopt;
}

// Needs the threadpool: a cwd to check, a user to look up, or an env file to read.
bool needs_pool(const Context& ctx, const protocol::CommandRequest& req) {
  const char* envs_file = env_lookup(ctx.base_env, "EXECD_ENVS");
  return req.uid || !req.cwd.empty() || (envs_file && *envs_file);
}

}  // namespace execd::runners
