// execd/context: what every handler module shares: the loop, the reaper, the
// containment (both owned by the Daemon), the configuration and the
// environment commands start from. Built once in main.
#pragma once

#include <uv.h>

#include <string>
#include <vector>

#include "execd/config.h"
#include "pty/cgroup.h"
#include "pty/reaper.h"

namespace execd {

namespace api {
class Journal;
class CommandRegistry;
}

struct Context {
  uv_loop_t* loop = nullptr;
  pty::Reaper* reaper = nullptr;
  pty::Containment* containment = nullptr;
  Config config;
  // execd's environment minus secrets, as "K=V"; commands start from this.
  std::vector<std::string> base_env;
  std::string shell;  // bash, else sh
  bool shutting_down = false;
  // The execution journal (always set by the Daemon; disabled with --no-journal).
  api::Journal* journal = nullptr;
  // Command records (bash session runs keep theirs there too, to be resumable).
  api::CommandRegistry* commands = nullptr;
};

// Milliseconds since the Unix epoch (event timestamps).
int64_t unix_ms();
// RFC 3339 with nanoseconds in the local zone, like Go's time.Time JSON.
std::string rfc3339_nano(int64_t unix_ns);
int64_t unix_ns();
// 32 lowercase hex characters from the kernel's CSPRNG (a UUIDv4 without dashes).
std::string random_id32();
// A UUIDv4 with dashes.
std::string random_uuid();
// Looks a name up in base_env; nullptr if absent.
const char* env_lookup(const std::vector<std::string>& env, std::string_view name);

}  // namespace execd
