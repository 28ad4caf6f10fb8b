// execd/state_dir: which directory holds execd's state (command records,
// retained output, the journal) and that it belongs to this execd alone. A
// second execd on the same directory would take the first one's running
// commands for lost ones, so <dir>/lock says whose it is, for the life of
// the process.
#pragma once

#include <string>

#include "execd/config.h"

namespace execd {

// Creates cfg.state_dir (0700; empty: kDefaultStateDir) and locks it.
// Without --state-dir, a default that cannot be created or is taken falls
// back (with a warning) to a private directory that goes away with this
// process: then `private_dir` is true and cfg.state_dir names it. Returns
// "" or why execd cannot start (main exits 1).
std::string claim_state_dir(Config& cfg, bool& private_dir);

// Removes the private directory's files and the directory, when execd stops.
void remove_private_state_dir(const std::string& dir);

}  // namespace execd
