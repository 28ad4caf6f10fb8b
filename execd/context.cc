// execd/context: see header.
#include "execd/context.h"

#include <cctype>

#include "pty/spawn.h"

namespace execd {

const char* env_lookup(const std::vector<std::string>& env, std::string_view name) {
  for (const auto& kv : env)
    if (kv.size() > name.size() && kv.compare(0, name.size(), name) == 0 && kv[name.size()] == '=')
      return kv.c_str() + name.size() + 1;
  return nullptr;
}

namespace {
// What no process execd starts gets of execd's environment (OpenSandbox's
// bootstrapStripEnv, and what its main.go unsets from its own environment
// at start). The rest of upstream's blacklist (EXECD_ENVS, JUPYTER_HOST,
// EXECD_ISOLATION_CONFIG) stays: upstream's /command passes it on, and the
// SDKs' commands.set_env writes to the file $EXECD_ENVS names.
bool stripped(std::string_view key) {
  std::string upper(key);
  for (char& c : upper) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
  return upper == "EXECD_ACCESS_TOKEN" || upper == "EXECD_RUNTIME_INIT" || upper == "OPENSANDBOX_LIFECYCLE" ||
         upper == "EXECD_LIFECYCLE_CONFIG" || upper == "JUPYTER_TOKEN";
}
}  // namespace

std::vector<std::string> Context::child_env() const {
  std::vector<std::string> env;
  env.reserve(base_env.size() + binding->envs.size() + 1);
  for (const std::string& kv : base_env)
    if (!stripped(std::string_view(kv).substr(0, kv.find('=')))) env.push_back(kv);
  for (const auto& [k, v] : binding->envs) pty::set_env(env, k, v);
  seal_env(env);
  return env;
}

std::vector<std::pair<std::string, std::string>> Context::metric_attributes() const {
  std::vector<std::pair<std::string, std::string>> out;
  if (binding->generation != 0) {
    if (!binding->sandbox_id.empty()) out.emplace_back("sandbox_id", binding->sandbox_id);
    out.emplace_back("generation", std::to_string(binding->generation));
    for (const auto& kv : binding->telemetry_attributes)
      if (kv.first != "sandbox_id" && kv.first != "generation") out.push_back(kv);
  }
  const size_t bound = out.size();
  for (const auto& kv : static_metric_attrs) {
    bool taken = false;
    for (size_t i = 0; i < bound && !taken; ++i) taken = out[i].first == kv.first;
    if (!taken) out.push_back(kv);
  }
  return out;
}

void Context::seal_env(std::vector<std::string>& env) const {
  if (!binding->sandbox_id.empty()) pty::set_env(env, "OPENSANDBOX_ID", binding->sandbox_id);
}

}  // namespace execd
