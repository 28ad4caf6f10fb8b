// execd/sessions/bash: bash sessions, one long-lived pty::BashSession per
// session. The registry owns every SessionEntry from POST /session until
// DELETE (and the shell of a deleted one until it is gone); each run is an
// execution (execd/exec) with a SessionRunner, linked to its entry. The
// routes are execd/api/sessions'.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "execd/context.h"
#include "execd/exec/launch.h"
#include "execd/exec/registry.h"
#include "execd/watch/watch.h"
#include "pty/runtime.h"

namespace execd::pty {
class BashSession;
}

namespace execd::sessions {

struct SessionEntry {
  std::string id;
  pty::BashSession* shell = nullptr;  // nullptr once destroyed
  bool dead = false;
  uint64_t runs = 0;
  std::string last_run;  // execution id of the latest run
};

enum class InterruptResult { not_found, not_running, interrupted };

class SessionRegistry {
 public:
  SessionRegistry(const Context& ctx, pty::Runtime& runtime, exec::LaunchPath& launches);
  ~SessionRegistry();
  const Context& ctx() const { return ctx_; }
  pty::Runtime& runtime() { return runtime_; }
  exec::Registry& executions() { return launches_.executions(); }
  exec::LaunchPath& launches() { return launches_; }
  // Sessions whose shell is running a run now.
  size_t busy() const;

  // `env`: what the shell starts with (execd's, with the EXECD_ENVS file).
  SessionEntry* create(const std::string& cwd, const std::vector<std::string>& env, std::string& error);
  SessionEntry* find(const std::string& id);
  // Sessions held, deleted ones whose shell is still going included.
  size_t count() const { return entries_.size() + dying_.size(); }
  // The execution id of the session's latest run ("" if none).
  std::string latest_run(const std::string& id);
  // Kills everything the session started; the shell object goes once reaped
  // (a running run then ends with the shell's death).
  void remove(const std::string& id);
  // DELETE /command?id=<session id>: stops the session's current run (the Go
  // daemon deleted the whole session).
  InterruptResult interrupt_run(const std::string& id);
  // remove() of every session (POST /internal/init's reset).
  void remove_all();
  // SIGKILL to every process of every session (daemon exit).
  void kill_all();
  // Lets go of every shell (daemon exit, after kill_all); runs still on end
  // as killed (the shells tell them).
  void clear();

 private:
  void gone(const std::string& id, pty::BashSession* shell);

  const Context& ctx_;
  pty::Runtime& runtime_;
  exec::LaunchPath& launches_;
  std::map<std::string, std::unique_ptr<SessionEntry>> entries_;
  // Shells of deleted sessions, until they are gone.
  std::map<pty::BashSession*, bool> dying_;
};

}  // namespace execd::sessions
