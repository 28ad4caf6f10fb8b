// execd/config: see header. Every flag is read through the flag table
// (execd/config_flags); this file holds Go's argument syntax around it, the
// environment fallbacks the table names, and the checks that span flags.
#include "execd/config.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <unordered_set>

#include "execd/config_flags.h"
#include "fs/small_file.h"
#include "protocol/go_syntax.h"

namespace execd {

namespace {

using config_flags::EnvUse;
using config_flags::Flag;
using config_flags::FlagGroup;

enum class TokenFileError { none, unreadable, empty };

TokenFileError read_token_file(const std::string& path, std::string& token) {
  std::optional<std::string> text = fs::read_small_file(path, 1 << 20);
  if (!text) return TokenFileError::unreadable;
  std::string t = std::move(*text);
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ' || t.back() == '\t')) t.pop_back();
  if (t.empty()) return TokenFileError::empty;
  token = std::move(t);
  return TokenFileError::none;
}

const char* system_getenv(const char* name) { return std::getenv(name); }

}  // namespace

bool is_loopback_address(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  // 127.0.0.0/8, written as a dotted quad.
  if (host.rfind("127.", 0) != 0) return false;
  int dots = 0;
  for (char c : host) {
    if (c == '.') ++dots;
    else if (c < '0' || c > '9') return false;
  }
  return dots == 3;
}

std::string parse_config(int argc, char** argv, Config& cfg, EnvGetter env) {
  if (!env) env = system_getenv;
  auto getenv_nonempty = [&](const std::string& name) -> const char* {
    const char* v = env(name.c_str());
    return v && *v ? v : nullptr;
  };
  config_flags::TokenFlags tokens;
  config_flags::Target target{cfg, tokens};
  std::unordered_set<const Flag*> given, from_env;
  auto was_given = [&](std::string_view name) { return given.count(config_flags::find_flag(name)) > 0; };

  for (int i = 1; i < argc; ++i) {
    std::string raw = argv[i];
    if (raw == "--") {
      for (int j = i + 1; j < argc; ++j) cfg.entrypoint.emplace_back(argv[j]);
      break;
    }
    // Go: one or two dashes, then a name that starts with neither '-' nor '='.
    std::string arg;
    if (raw.rfind("--", 0) == 0) arg = raw.substr(2);
    else if (raw.rfind("-", 0) == 0 && raw.size() > 1) arg = raw.substr(1);
    else return "unexpected argument: " + raw;
    if (arg.empty() || arg[0] == '-' || arg[0] == '=') return "bad flag syntax: " + raw;
    std::string name = arg, value;
    bool has_value = false;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    const Flag* flag = config_flags::find_flag(name);
    if (!flag) return "unknown flag: " + raw;
    if (!flag->reader.takes_value) {
      // A switch: bare, or =true/=false; never the next argument.
      if (!flag->reader.read(has_value ? value : "true", target))
        return "invalid boolean value \"" + value + "\" for flag -" + name;
    } else {
      // The value is after '=' or the next argument, whatever it looks like.
      bool present = has_value || i + 1 < argc;
      if (present && !has_value) value = argv[++i];
      if (!present || !flag->reader.read(value, target)) return "--" + name + " " + flag->reader.needs;
    }
    given.insert(flag);
  }
  if (cfg.show_help || cfg.show_help_markdown || cfg.show_version) return {};

  // The environment: each variable the table names, used as it says.
  for (const FlagGroup& group : config_flags::flag_table()) {
    for (const Flag& flag : group.flags) {
      const char* v = flag.env.empty() ? nullptr : getenv_nonempty(flag.env);
      if (!v) continue;
      bool on = false;
      switch (flag.env_use) {
        case EnvUse::fallback:  // a flag wins
          if (given.count(&flag)) break;
          if (!flag.reader.read(v, target)) return flag.env + " " + flag.reader.needs;
          from_env.insert(&flag);
          break;
        case EnvUse::turns_on:
          if (protocol::parse_go_bool(v, on) && on) flag.reader.read("true", target);
          break;
        case EnvUse::token_source:  // weighed below
          break;
      }
    }
  }
  // The Go execd's settings execd does without: one warning for each given.
  for (const FlagGroup& group : config_flags::flag_table()) {
    for (const Flag& flag : group.flags) {
      if (flag.ignored_because.empty()) continue;
      if (given.count(&flag)) cfg.warnings.push_back("--" + flag.name + " accepted but ignored: " + flag.ignored_because);
      else if (from_env.count(&flag)) cfg.warnings.push_back(flag.env + " is set but ignored: " + flag.ignored_because);
    }
  }

  // What spans flags. First, where execd listens.
  if (!cfg.tcp && cfg.vsock_port == 0) return "--no-tcp needs --vsock-port (execd would listen nowhere)";
  cfg.state_dir_given = was_given("state-dir");

  // Whichever wins, a file named for a token is a secret of execd's.
  // As the kernel finds them (symlinks resolved, a relative path made
  // absolute): isolated sessions cover the files themselves.
  auto add_secret = [&](const std::string& f) {
    char real[PATH_MAX];
    if (realpath(f.c_str(), real)) cfg.secret_files.emplace_back(real);
    else if (f[0] != '/' && getcwd(real, sizeof real)) cfg.secret_files.push_back(std::string(real) + "/" + f);
    else cfg.secret_files.push_back(f);
  };
  for (const std::string* f : {&tokens.access_token_file, &tokens.envd_access_token_file})
    if (!f->empty()) add_secret(*f);
  for (const char* var : {"EXECD_ACCESS_TOKEN_FILE", "EXECD_ENVD_ACCESS_TOKEN_FILE"})
    if (const char* path = getenv_nonempty(var)) add_secret(path);

  // Access token: the first source found wins; only that one is read.
  if (was_given("access-token")) {
    cfg.access_token = tokens.access_token;
    cfg.access_token_source = "--access-token";
    if (was_given("access-token-file"))
      cfg.warnings.push_back("--access-token-file ignored: --access-token was given");
  } else if (was_given("access-token-file")) {
    switch (read_token_file(tokens.access_token_file, cfg.access_token)) {
      case TokenFileError::unreadable: return "cannot read --access-token-file " + tokens.access_token_file;
      case TokenFileError::empty: return "--access-token-file " + tokens.access_token_file + " is empty";
      case TokenFileError::none: break;
    }
    cfg.access_token_source = "--access-token-file";
  } else if (const char* t = getenv_nonempty("EXECD_ACCESS_TOKEN")) {
    cfg.access_token = t;
    cfg.access_token_source = "EXECD_ACCESS_TOKEN";
  } else if (const char* path = getenv_nonempty("EXECD_ACCESS_TOKEN_FILE")) {
    switch (read_token_file(path, cfg.access_token)) {
      case TokenFileError::unreadable: return "cannot read EXECD_ACCESS_TOKEN_FILE " + std::string(path);
      case TokenFileError::empty: return "EXECD_ACCESS_TOKEN_FILE " + std::string(path) + " is empty";
      case TokenFileError::none: break;
    }
    cfg.access_token_source = "EXECD_ACCESS_TOKEN_FILE";
  }
  if (!cfg.entrypoint.empty() && !cfg.init_mode)
    return "unexpected argument: " + cfg.entrypoint.front() + " (an entrypoint after -- needs --init)";
  // A warm-pool execd may start without a token: POST /init brings its hash.
  if (cfg.access_token.empty() && !cfg.insecure_no_auth && !cfg.runtime_init)
    return "no access token: give --access-token, --access-token-file, EXECD_ACCESS_TOKEN or "
           "EXECD_ACCESS_TOKEN_FILE (or --insecure-no-auth to run without one)";
  if (!cfg.access_token.empty() && cfg.insecure_no_auth)
    return "--insecure-no-auth given together with an access token (from " + cfg.access_token_source + ")";

  // The envd token, the same way: flag, file flag, env, env file.
  if (was_given("envd-access-token")) {
    cfg.envd_access_token = tokens.envd_access_token;
    cfg.envd_access_token_source = "--envd-access-token";
  } else if (was_given("envd-access-token-file")) {
    if (read_token_file(tokens.envd_access_token_file, cfg.envd_access_token) != TokenFileError::none)
      return "cannot read a token from --envd-access-token-file " + tokens.envd_access_token_file;
    cfg.envd_access_token_source = "--envd-access-token-file";
  } else if (const char* t = getenv_nonempty("EXECD_ENVD_ACCESS_TOKEN")) {
    cfg.envd_access_token = t;
    cfg.envd_access_token_source = "EXECD_ENVD_ACCESS_TOKEN";
  } else if (const char* path = getenv_nonempty("EXECD_ENVD_ACCESS_TOKEN_FILE")) {
    if (read_token_file(path, cfg.envd_access_token) != TokenFileError::none)
      return "cannot read a token from EXECD_ENVD_ACCESS_TOKEN_FILE " + std::string(path);
    cfg.envd_access_token_source = "EXECD_ENVD_ACCESS_TOKEN_FILE";
  }
  // The E2B listeners take execd's token or the envd one (execd/access);
  // with neither (--insecure-no-auth and no envd token) they are open, for
  // E2B's SDKs in debug mode, which send no token: then loopback only.
  bool e2b_open = cfg.insecure_no_auth && cfg.envd_access_token.empty();
  if (!was_given("envd-host")) cfg.envd_host = e2b_open ? "127.0.0.1" : cfg.host;
  if (e2b_open && (cfg.envd_port >= 0 || cfg.code_interpreter_port >= 0) && !is_loopback_address(cfg.envd_host))
    return "--envd-host " + cfg.envd_host +
           " is not a loopback address: with --insecure-no-auth and no --envd-access-token the E2B "
           "listeners take no token, so they only listen on loopback";
  return {};
}

}  // namespace execd
