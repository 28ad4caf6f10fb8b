// execd/journal/entries: see header.
#include "execd/journal/entries.h"

#include <unistd.h>

#include "execd/clock.h"
#include "protocol/changes.h"

namespace execd::journal {

namespace {
ojson begin(std::string_view type, int64_t time_ns) {
  ojson e;
  e["type"] = type;
  e["time"] = rfc3339_nano(time_ns);
  return e;
}
}  // namespace

ojson run_entry(const exec::ExecutionSpec& spec, const protocol::ExecutionResult& res, int64_t started_ns,
                int64_t finished_ns, bool lost, uint64_t stdin_bytes) {
  using exec::Kind;
  ojson e = begin(exec::kind_name(spec.kind), finished_ns ? finished_ns : unix_ns());
  e["id"] = spec.id;
  if (spec.kind == Kind::session_run) e["session"] = spec.owner;
  if (spec.kind == Kind::code_run) {
    e["context"] = spec.owner;
    e["language"] = spec.language;
    e["code"] = spec.content;
  } else {
    e["command"] = spec.content;
    if (!spec.argv.empty()) e["argv"] = spec.argv;
  }
  e["cwd"] = spec.cwd;
  e["uid"] = spec.uid ? ojson(*spec.uid) : ojson(getuid());
  if (spec.gid) e["gid"] = *spec.gid;
  if (spec.kind == Kind::command || spec.kind == Kind::process) {
    e["background"] = spec.background;
    e["tty"] = spec.tty;
  }
  e["started_at"] = rfc3339_nano(started_ns);
  e["finished_at"] = rfc3339_nano(finished_ns);
  ojson out;
  out["exit_code"] = res.exit_code ? ojson(*res.exit_code) : ojson();
  out["signal"] = res.signal.empty() ? ojson() : ojson(res.signal);
  out["timed_out"] = res.timed_out;
  out["interrupted"] = res.interrupted;
  out["lost"] = lost;
  if (!res.status.empty()) out["status"] = res.status;
  if (!res.start_error.empty()) out["error"] = res.start_error;
  out["execution_time_ms"] = res.execution_time_ms;
  out["stdout_bytes"] = res.stdout_bytes;
  out["stderr_bytes"] = res.stderr_bytes;
  out["stdout_sha256"] = res.stdout_sha256;
  out["stderr_sha256"] = res.stderr_sha256;
  if (spec.stdin_open) out["stdin_bytes"] = stdin_bytes;
  e["result"] = out;
  if (res.changes) e["changes"] = protocol::changes_json(*res.changes);
  return e;
}

ojson file_entry(std::string_view op, const ojson& extra, ojson files) {
  ojson e = begin("file", unix_ns());
  e["op"] = op;
  for (auto it = extra.begin(); it != extra.end(); ++it) e[it.key()] = it.value();
  e["files"] = std::move(files);
  return e;
}

ojson extraction_entry(const Extraction& x) {
  ojson e = begin("file", unix_ns());
  e["op"] = "extract";
  e["path"] = x.target;
  e["archive_sha256"] = x.archive_sha256;
  e["archive_bytes"] = x.archive_bytes;
  e["entries"] = x.entries;
  e["bytes"] = x.bytes;
  e["replaced"] = x.replaced;
  return e;
}

ojson pty_session_entry(const std::string& id, const std::string& command, const std::string& cwd, uid_t uid,
                        int64_t started_ns, int exit_code) {
  int64_t now = unix_ns();
  ojson e = begin("pty_session", now);
  e["id"] = id;
  e["command"] = command;
  e["cwd"] = cwd;
  e["uid"] = uid;
  e["started_at"] = rfc3339_nano(started_ns);
  e["finished_at"] = rfc3339_nano(now);
  e["result"] = {{"exit_code", exit_code}};
  return e;
}

ojson harness_entry(std::string_view source) {
  ojson e = begin("harness", unix_ns());
  if (!source.empty()) e["source"] = source;
  return e;
}

}  // namespace execd::journal
