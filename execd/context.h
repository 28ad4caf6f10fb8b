// execd/context: the settings every part of execd reads and none changes
// (but for what POST /init binds): the loop, the configuration, the
// environment commands start from and the shell. Built once in main, read-only from then on (services, such as the
// reaper, the journal or the executions, are handed to whoever needs them
// when it is built).
#pragma once

#include <uv.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "execd/config.h"

namespace execd {

// What POST /internal/init (or /init) bound: empty until then.
struct Binding {
  std::vector<std::pair<std::string, std::string>> envs;
  std::string sandbox_id;
  uint64_t generation = 0;
  std::vector<std::pair<std::string, std::string>> telemetry_attributes;
};

struct Context {
  uv_loop_t* loop = nullptr;
  Config config;
  // execd's environment minus secrets, as "K=V".
  std::vector<std::string> base_env;
  // What POST /init bound (--runtime-init), laid over base_env for every
  // process execd starts: the one thing here that changes, once, and only
  // through execd/lifecycle/runtime_binding (shared, so copies see it).
  std::shared_ptr<Binding> binding = std::make_shared<Binding>();
  // What every metric is stamped with before any binding (OpenSandbox's
  // static attributes): sandbox_id from OPENSANDBOX_ID, then
  // OPENSANDBOX_EXECD_METRICS_EXTRA_ATTRS. Read once at start.
  std::vector<std::pair<std::string, std::string>> static_metric_attrs;
  std::string shell;  // bash, else sh
  // The home of execd's own user (its passwd entry, else HOME, else "/"; "/"
  // if it is not a directory), found once at start: the default working
  // directory of E2B processes, which need no lookup on the loop then.
  std::string home;

  // The environment a process starts from (OpenSandbox's precedence, lowest
  // first): base_env without the settings no process gets
  // (EXECD_RUNTIME_INIT, OPENSANDBOX_LIFECYCLE, EXECD_LIFECYCLE_CONFIG and
  // the tokens, any case), the binding's envs, OPENSANDBOX_ID. The
  // EXECD_ENVS file and a request's envs go over it, then seal_env.
  std::vector<std::string> child_env() const;
  // Last, over everything: OPENSANDBOX_ID is the bound sandbox id (no
  // request or file overrides it); before a binding, nothing changes.
  void seal_env(std::vector<std::string>& env) const;
  // The attributes of every metric now (upstream's sharedAttrs()): once
  // bound, sandbox_id, generation and the binding's telemetry attributes,
  // then the static ones whose keys the binding did not give.
  std::vector<std::pair<std::string, std::string>> metric_attributes() const;
};

// Looks a name up in an environment of "K=V" strings (base_env, child_env());
// nullptr if absent.
const char* env_lookup(const std::vector<std::string>& env, std::string_view name);

}  // namespace execd
