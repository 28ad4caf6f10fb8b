// execd/secrets: keeps execd's own secrets, the flags and variables the
// flag table marks (execd/config_flags: the access tokens and where they
// are), away from the processes execd starts.
#pragma once

#include <string>
#include <vector>

namespace execd {

// Call once the configuration holds its copies of the tokens. Blanks the
// token values in execd's original argument and environment memory, which
// /proc/<execd>/cmdline (world-readable) and /proc/<execd>/environ (readable
// by commands running as root) show whatever unsetenv() does; removes the
// secret variables from execd's environment; and returns that environment,
// as "K=V", for commands to start from (Context::base_env).
std::vector<std::string> hide_secrets(int argc, char** argv);

}  // namespace execd
