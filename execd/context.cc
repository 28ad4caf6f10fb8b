// execd/context: see header.
#include "execd/context.h"

#include <cctype>

#include "protocol/runtime_init.h"
#include "pty/spawn.h"

namespace execd {

const char* env_lookup(const std::vector<std::string>& env, std::string_view name) {
  for (const auto& kv : env)
    if (kv.size() > name.size() && kv.compare(0, name.size(), name) == 0 && kv[name.size()] == '=')
      return kv.c_str() + name.size() + 1;
  return nullptr;
}

namespace {
// bootstrap.sh's strip list for the entrypoint (upstream's
// bootstrapStripEnv): a subset of protocol::kReservedEnvKeys.
bool entrypoint_keeps(std::string_view upper_key) {
  return upper_key == "JUPYTER_HOST" || upper_key == "JUPYTER_TOKEN" || upper_key == "EXECD_ENVS" ||
         upper_key == "EXECD_ISOLATION_CONFIG";
}
}  // namespace

std::vector<std::string> Context::child_env(EnvFor who) const {
  std::vector<std::string> env;
  env.reserve(base_env.size() + binding->envs.size() + 1);
  for (const std::string& kv : base_env) {
    std::string_view key = std::string_view(kv).substr(0, kv.find('='));
    if (protocol::reserved_env_key(key)) {
      std::string upper(key);
      for (char& c : upper) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
      if (!(who == EnvFor::entrypoint && entrypoint_keeps(upper))) continue;
    }
    env.push_back(kv);
  }
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
