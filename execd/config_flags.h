// execd/config_flags: the table of execd's command-line flags. One row per
// flag: its name, how its value is read and into which Config field (the
// field's initializer is the default), its environment variable and its
// help. parse_config (execd/config) reads the command line through it and
// --help and --help-markdown (execd/config_usage) print it, so a flag is
// added, changed and documented in this one place. What spans several flags
// (which token source wins, --no-tcp without --vsock-port, ...) is checked
// by parse_config once the table has read every flag.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "execd/config.h"

namespace execd::config_flags {

// The token flags' values, kept out of Config until parse_config has
// weighed all four token sources (two flags, two variables): only the one
// that wins is read, so a token file that is not selected is never opened.
struct TokenFlags {
  std::string access_token, access_token_file, envd_access_token, envd_access_token_file;
};

// Where a value read from the command line or the environment goes.
struct Target {
  Config& cfg;
  TokenFlags& tokens;
};

// How a flag's value is read (config_flags.cc builds one per kind of value:
// switch, number, count, byte count, duration, text, choice, path list).
struct Reader {
  // False for a switch (a bool flag): -name or -name=BOOL, never with the
  // next argument as its value, as in Go.
  bool takes_value = true;
  // Writes the value into its field; false when it is malformed or out of
  // range (the field is then unchanged).
  std::function<bool(const std::string& value, Target&)> read{};
  // The field's value in `defaults`, written as the flag takes it; "" when
  // there is nothing worth showing (a switch, an empty text).
  std::function<std::string(const Config& defaults)> show{};
  // What is wrong with a bad or missing value, after the flag's or the
  // variable's name: "needs a count >= 1".
  std::string needs{};
};

// How a flag's environment variable is used.
enum class EnvUse {
  // Read as the flag's value when the flag is not given; a bad value is an
  // error like a bad flag.
  fallback,
  // A true value (Go's strconv.ParseBool) turns the switch on whatever the
  // command line says; any other value is ignored (EXECD_INIT, as the
  // OpenSandbox server sets it).
  turns_on,
  // One of the token sources parse_config weighs after the table.
  token_source,
};

// Whether execd hides a flag's value from the processes it starts
// (execd/secrets).
enum class Secrecy {
  none,
  // A token: blanked in /proc/<execd>/cmdline and environ, and its variable
  // never reaches a command.
  token,
  // Where a token is (a file): its variable never reaches a command.
  token_path,
};

struct Flag {
  std::string name{};        // as written after - or --; empty: a variable with no flag
  std::string alias{};       // another name for the same flag ("h" for "help")
  std::string value_name{};  // the value in --help: "N", "D", "BYTES"...; empty for a switch
  Reader reader{};
  std::string help{};  // prose without line breaks: the renderers wrap it
  // Shown as the default instead of the reader's show() of a fresh Config,
  // where the field's initial value says too little ("" for the state dir
  // means /var/lib/execd).
  std::string default_text{};
  std::string env{};  // its environment variable, or empty
  EnvUse env_use = EnvUse::fallback;
  Secrecy secrecy = Secrecy::none;
  // Accepted for the Go execd's sake and not acted on: why, for the warning
  // it produces when given (or its variable set).
  std::string ignored_because{};
};

struct FlagGroup {
  std::string title{};
  std::vector<Flag> flags{};
};

// The whole table, in --help's order.
const std::vector<FlagGroup>& flag_table();

// The flag called `name` (or so aliased); nullptr if there is none.
const Flag* find_flag(std::string_view name);

// The default --help shows: default_text, else the reader's show() of a
// default-constructed Config ("" for none).
std::string default_of(const Flag& flag);

}  // namespace execd::config_flags
