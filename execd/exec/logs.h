// execd/exec/logs: an execution's retained stdout and stderr read by
// combined byte offset, as GET /command/{id}/logs and the isolated run logs
// serve them (the handlers frame the answer). Structured events are kept in
// the same log (exec/output_log) and left out of what is read here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "execd/exec/execution.h"

namespace execd::exec {

// Where a logs read of `e` from combined `offset` starts: the log keeps the
// newest bytes, so a cursor before them reads from the first; `truncated`
// when older bytes are no longer kept.
struct LogsStart {
  uint64_t cursor;
  bool truncated;
};
LogsStart logs_start(Execution& e, uint64_t offset);

// Reads at most `max_bytes` of `e`'s log from `cursor`; `done` gets the
// error (a uv code, 0), the stdout and stderr bytes, and the next cursor.
// A log with a read out pins its execution (Execution::in_use): `e` is
// still there when `done` runs.
using LogsDone = std::function<void(int err, std::string text, uint64_t next)>;
void read_logs(Execution& e, uint64_t cursor, size_t max_bytes, LogsDone done);

}  // namespace execd::exec
