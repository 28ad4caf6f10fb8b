// execd/envd/processes: the processes of E2B's process.Process service
// (envd's spec/process/process.proto; its Connect handlers are
// api/envd/process): the table that reaches each by E2B's pid or tag.
//
// Every process is an execd execution (exec/), Kind::process, run by the
// same CommandRunner as POST /command: so it has an id, a status, retained
// output, a record that survives a restart and a journal entry, it runs in
// its own cgroup, and it is reached by E2B's pid or tag through this
// service's table. What execd does beyond envd:
//
//  * Connect replays what the process wrote while nobody was attached (the
//    newest --log-limit bytes; bytes no longer kept are named in the stream's
//    trailing metadata, `execd-gap`), then continues live, then the end;
//    a finished process can be connected to until --retention has passed;
//  * SendSignal reaches the whole cgroup: `sleep &` children of a shell die
//    with it, and a process whose leader has exited can still be killed
//    while anything it started runs;
//  * a Start stream whose client cannot keep up holds the process (it
//    blocks on its pipe), as every execd stream does, instead of dropping
//    output; a client that leaves leaves the process running.
//
// Limits: --envd-max-processes running at once (resource_exhausted before
// anything is spawned).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

#include "execd/context.h"
#include "execd/exec/launch.h"
#include "execd/exec/registry.h"
#include "protocol/connect.h"
#include "protocol/envd.h"
#include "pty/runtime.h"

namespace execd::envd {

class EnvdProcesses {
 public:
  EnvdProcesses(const Context& ctx, pty::Runtime& runtime, exec::LaunchPath& launches)
      : ctx(ctx), runtime(runtime), executions(launches.executions()), launches(launches) {}

  struct Entry {
    std::string exec_id;
    protocol::envd::ProcessConfig config;
    std::optional<std::string> tag;
    uint32_t pid = 0;
    bool pty = false;
  };

  // The newest process with that pid or tag whose execution is still kept.
  Entry* find(const protocol::envd::ProcessSelector& sel);
  exec::Execution* execution(const Entry& e) { return executions.find(e.exec_id); }
  void add(Entry e);
  size_t running();
  template <class Fn>
  void each(Fn fn) {
    for (auto& [pid, e] : by_pid_) fn(e);
  }

  const Context& ctx;
  pty::Runtime& runtime;
  exec::Registry& executions;
  exec::LaunchPath& launches;

 private:
  // Entries whose execution the registry has let go of.
  void prune();
  // Beyond this many entries, add() prunes first (the registry keeps at
  // most --max-records finished executions besides the running ones).
  size_t executions_kept_hint() const;
  std::unordered_map<uint32_t, Entry> by_pid_;
  std::unordered_map<std::string, uint32_t> by_tag_;
};

// not_found: no process with the selector's pid or tag (or none given).
protocol::connect::Error process_not_found(const protocol::envd::ProcessSelector& sel);

}  // namespace execd::envd
