// execd/api/sessions: the /session API on top of pty::BashSession (one
// long-lived bash per session). The registry owns every SessionEntry from
// POST /session until DELETE, and each entry owns its current run: the run
// outlives the HTTP response that streams it and is linked to it.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "execd/context.h"

namespace execd::pty {
class BashSession;
}

namespace execd::api {

struct SessionEntry;
class SessionRun;

enum class InterruptResult { not_found, not_running, interrupted };

class SessionRegistry {
 public:
  explicit SessionRegistry(Context& ctx);
  ~SessionRegistry();
  Context& ctx() { return ctx_; }

  SessionEntry* create(const std::string& cwd, std::string& error);
  SessionEntry* find(const std::string& id);
  // The command record id of the session's latest run ("" if none).
  std::string latest_run(const std::string& id);
  // Kills everything the session started; the shell object goes once reaped.
  void remove(const std::string& id);
  // DELETE /command?id=<session id>: stops the session's current run (the Go
  // daemon deleted the whole session).
  InterruptResult interrupt_run(const std::string& id);
  // SIGKILL to every process of every session (daemon exit).
  void kill_all();
  // Lets go of every shell (daemon exit, after kill_all).
  void clear();

 private:
  void gone(const std::string& id, pty::BashSession* shell);

  Context& ctx_;
  std::map<std::string, std::unique_ptr<SessionEntry>> entries_;
  std::map<pty::BashSession*, bool> dying_;
  // Runs of deleted sessions, kept until their shell is gone.
  std::map<pty::BashSession*, std::unique_ptr<SessionRun>> dying_runs_;
};

}  // namespace execd::api
