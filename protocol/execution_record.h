// protocol/execution_record: an execution's record as it is kept on disk, so
// a restarted execd still knows every execution (command, session run, code
// run) within retention. A record is one JSON line and a second line
// "sha256:<hex of the first line>"; execd appends them to its records log
// (execd/exec/record_store), and one whose checksum does not match (torn,
// edited) is rejected on load.
// Also the fingerprint that tells a retried start from a different one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "protocol/envelope.h"
#include "protocol/requests.h"

namespace execd::protocol {

struct StoredExecution {
  std::string kind = "command";  // command | session_run | code_run
  std::string id;
  std::string content;
  std::vector<std::string> argv;  // an argv command (content is then its display form)
  std::string fingerprint;  // of the request that started it
  std::string cwd;
  std::optional<uint32_t> uid, gid;
  std::string owner;     // the session or code context it ran in
  std::string language;  // code runs
  uint64_t stdin_accepted = 0;
  bool background = false;
  bool tty = false;
  bool stdin_open = false;
  int64_t started_ns = 0, finished_ns = 0;
  // The process group to end if execd died while it ran: its leader's pid,
  // the kernel's boot id and the leader's start time (clock ticks after
  // boot, /proc/<pid>/stat field 22), so a recycled pid is never signalled.
  int64_t pgid = 0;
  std::string boot_id;
  uint64_t start_ticks = 0;
  bool finished = false;  // the result below is final
  bool lost = false;      // execd went away while it ran
  ExecutionResult result;
  uint64_t output_total = 0;  // bytes of output produced (stored or not)
};

std::string encode_stored_execution(const StoredExecution& r);
// nullopt: not a record (bad checksum, torn, unknown shape).
std::optional<StoredExecution> decode_stored_execution(std::string_view file);

// Same fingerprint = the same start request (command, cwd, env, user,
// limits, flags); field order and defaults do not matter.
std::string request_fingerprint(const CommandRequest& req);

}  // namespace execd::protocol
