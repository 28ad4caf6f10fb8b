// execd/api/pty: PTY sessions over the OpenSandbox WebSocket protocol
// (contract section 6). The registry owns every PtyEntry from POST /pty until
// DELETE (and, if its process was still running, until that process has been
// reaped); an entry owns its pty::PtySession and is linked to at most one
// client (a WebSocket handler, owned by its WebSocket).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "execd/context.h"

namespace execd::api {

struct PtyEntry;

class PtyRegistry {
 public:
  explicit PtyRegistry(Context& ctx);
  ~PtyRegistry();
  Context& ctx() { return ctx_; }

  PtyEntry* create();
  PtyEntry* find(const std::string& id);
  // Takes the entry out of the table; it is freed now, or after its process exits.
  void remove(PtyEntry* e);
  // SIGKILL to every process of every session (daemon exit).
  void kill_all();
  // Frees every entry (daemon exit, after kill_all and with no client left).
  void clear();
  // Entries removed while running whose process has exited (from the sweep).
  void reap();
  size_t live_clients() const;

 private:
  Context& ctx_;
  std::map<std::string, std::unique_ptr<PtyEntry>> entries_;
  std::vector<std::unique_ptr<PtyEntry>> dying_;
};

}  // namespace execd::api
