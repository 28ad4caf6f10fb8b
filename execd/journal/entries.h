// execd/journal/entries: the body of every kind of journal entry, in one
// place, so that one file shows every shape the journal holds. Each body
// starts with "type" and "time" (RFC 3339, nanoseconds); the journal adds
// "seq" and "prev" in front when it appends it (protocol/journal).
//
//   a run      type = its kind ("command", "session_run", "code_run",
//              "process", "isolated_run"): what ran, as whom, where, and
//              its result (exit, signal, byte counts, digests, changes)
//   "file"     a change made through the API (op upload|mv|rm|chmod|
//              replace|mkdir|extract): the files as they are after it
//   "pty_session"  a terminal that ended
//   "harness"  a client's own event (POST /journal/events), kept byte for
//              byte under "event"
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "execd/exec/execution.h"

namespace execd::journal {

using ojson = nlohmann::ordered_json;

// A finished (or lost) run.
ojson run_entry(const exec::ExecutionSpec& spec, const protocol::ExecutionResult& result, int64_t started_ns,
                int64_t finished_ns, bool lost, uint64_t stdin_bytes);

// A change made through the file API: `files` are the descriptions of the
// touched files after it (path, exists, mode, size, sha256 or kind); `extra`
// fields of the operation come before them.
ojson file_entry(std::string_view op, const ojson& extra, ojson files);

// An archive extracted into `target` (POST /files/archive).
struct Extraction {
  std::string target;
  std::string archive_sha256;
  uint64_t archive_bytes = 0, entries = 0, bytes = 0;
  bool replaced = false;
};
ojson extraction_entry(const Extraction& x);

// A PTY session whose shell exited with `exit_code`.
ojson pty_session_entry(const std::string& id, const std::string& command, const std::string& cwd, uid_t uid,
                        int64_t started_ns, int exit_code);

// A harness's own event; the raw event itself is appended after these
// fields by Journal::append(body, "event", raw).
ojson harness_entry(std::string_view source);

}  // namespace execd::journal
