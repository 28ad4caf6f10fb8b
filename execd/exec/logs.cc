// execd/exec/logs: see header.
#include "execd/exec/logs.h"

#include <algorithm>
#include <utility>

#include "execd/exec/output_log.h"

namespace execd::exec {

LogsStart logs_start(Execution& e, uint64_t offset) {
  OutputLog* log = e.log();
  uint64_t cursor = std::max(offset, log->first());
  bool truncated = log->first() > 0 || e.produced(0) + e.produced(1) + e.produced(2) > log->end();
  return {cursor, truncated};
}

void read_logs(Execution& execution, uint64_t cursor, size_t max_bytes, LogsDone done) {
  Execution* e = &execution;
  e->log()->read(cursor, max_bytes, [e, cursor, done = std::move(done)](int err, std::string data) {
    if (err) return done(err, std::string(), cursor);
    uint64_t next = cursor + data.size();
    const auto& idx = e->log()->index();
    if (idx.stored(kEvents) == 0) return done(0, std::move(data), next);
    std::string text;
    for (const auto& piece : idx.pieces(cursor, next))
      if (piece.stream != kEvents) text.append(data, piece.at - cursor, piece.len);
    done(0, std::move(text), next);
  });
}

}  // namespace execd::exec
