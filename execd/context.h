// execd/context: the settings every part of execd reads and none changes
// (but for what POST /init binds): the loop, the configuration, the
// environment commands start from and the shell. Built once in main, read-only from then on (services, such as the
// reaper, the journal or the executions, are handed to whoever needs them
// when it is built).
#pragma once

#include <uv.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "execd/config.h"

namespace execd {

struct Context {
  uv_loop_t* loop = nullptr;
  Config config;
  // execd's environment minus secrets, as "K=V".
  std::vector<std::string> base_env;
  // What POST /init bound (--runtime-init), laid over base_env for every
  // process execd starts: the one thing here that changes, once, and only
  // through execd/api/runtime_binding (shared, so copies see it).
  std::shared_ptr<std::vector<std::pair<std::string, std::string>>> bound_env =
      std::make_shared<std::vector<std::pair<std::string, std::string>>>();
  std::string shell;  // bash, else sh
  // The home of execd's own user (its passwd entry, else HOME, else "/"; "/"
  // if it is not a directory), found once at start: the default working
  // directory of E2B processes, which need no lookup on the loop then.
  std::string home;

  // The environment a process starts from: base_env with bound_env over it.
  std::vector<std::string> child_env() const;
};

// Looks a name up in an environment of "K=V" strings (base_env, child_env());
// nullptr if absent.
const char* env_lookup(const std::vector<std::string>& env, std::string_view name);

}  // namespace execd
