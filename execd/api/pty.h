// execd/api/pty: PTY sessions over the OpenSandbox WebSocket protocol
// (OpenSandbox's PTY protocol, as the Go daemon 1.0.19 speaks it). The registry owns every PtyEntry from POST /pty until
// DELETE (and, if its process was still running, until that process has been
// reaped); an entry owns its pty::PtySession and is linked to at most one
// client (a WebSocket handler, owned by its WebSocket).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "execd/context.h"
#include "execd/routes.h"
#include "execd/activity.h"
#include "pty/runtime.h"

namespace execd::journal {
class Journal;
}

namespace execd::api {

struct PtyEntry;

class PtyRegistry {
 public:
  PtyRegistry(const Context& ctx, pty::Runtime& runtime, journal::Journal& journal);
  ~PtyRegistry();
  const Context& ctx() const { return ctx_; }
  pty::Runtime& runtime() { return runtime_; }
  journal::Journal& journal() { return journal_; }

  PtyEntry* create();
  // A session under an id execd reserved elsewhere (POST /pty/operations);
  // nullptr when the id is taken.
  PtyEntry* create_with_id(const std::string& id);
  PtyEntry* find(const std::string& id);
  // Sessions held, removed ones whose process still runs included.
  size_t count() const { return entries_.size() + dying_.size(); }
  // Takes the entry out of the table; it is freed now, or after its process exits.
  void remove(PtyEntry* e);
  // remove() of every session (POST /internal/init's reset).
  void remove_all();
  // SIGKILL to every process of every session (daemon exit).
  void kill_all();
  // Frees every entry (daemon exit, after kill_all and with no client left).
  void clear();
  // Entries removed while running whose process has exited (from the sweep).
  void reap();
  size_t live_clients() const;
  // Where terminal output and input are noted (GET /activity); and each
  // session is an actor for track_changes while it lives.
  void set_activity(Activity* a) { activity_ = a; }
  Activity* activity() const { return activity_; }
  // "pty:<id>" of every session (the activity probe).
  void actors(std::vector<std::string>& out) const;

 private:
  const Context& ctx_;
  pty::Runtime& runtime_;
  journal::Journal& journal_;
  std::map<std::string, std::unique_ptr<PtyEntry>> entries_;
  std::vector<std::unique_ptr<PtyEntry>> dying_;
  Activity* activity_ = nullptr;
};

void add_pty_routes(RouteTable& routes, PtyRegistry& ptys);

// POST /pty/operations (execd/api/operations): a dormant session under `id`
// in `cwd` (made already), started by its first WebSocket attach, as POST
// /pty's. False when the id is taken.
bool create_pty_session(PtyRegistry& ptys, const std::string& id, const std::string& cwd, const std::string& command);
// The session `id` has a process running (false: no such session, not
// started yet, or exited).
bool pty_session_running(PtyRegistry& ptys, const std::string& id);

}  // namespace execd::api
