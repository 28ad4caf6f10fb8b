// execd/context: see header.
#include "execd/context.h"

#include "pty/spawn.h"

namespace execd {

const char* env_lookup(const std::vector<std::string>& env, std::string_view name) {
  for (const auto& kv : env)
    if (kv.size() > name.size() && kv.compare(0, name.size(), name) == 0 && kv[name.size()] == '=')
      return kv.c_str() + name.size() + 1;
  return nullptr;
}

std::vector<std::string> Context::child_env() const {
  std::vector<std::string> env = base_env;
  for (const auto& [k, v] : *bound_env) pty::set_env(env, k, v);
  return env;
}

}  // namespace execd
