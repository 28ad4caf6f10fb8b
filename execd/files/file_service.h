// execd/files/file_service: FileService, what every file route and file
// stream runs with: the settings, the gate that caps their pool threads, the
// journal their changes go to, and (for the per-user and isolated-session
// services) the user and mount namespace their work runs as and in.
#pragma once

#include <uv.h>

#include <memory>
#include <string>

#include "execd/context.h"
#include "execd/work_gate.h"
#include "fs/identity.h"
#include "pty/namespaces.h"

namespace execd::exec {
class StateBudget;
}

namespace execd::journal {
class Journal;
}

namespace execd::files {

// What the /files, /directories, upload and download routes share: the
// settings, the gate that caps their pool threads, and the journal their
// changes go to.
struct FileService {
  const Context& ctx;
  WorkGate& gate;
  journal::Journal& journal;
  // The /v1/filesystem/{uid}/{gid} services: the user their jobs run as.
  const fs::Identity* identity = nullptr;
  // An isolated session's files (sessions/isolated): every piece of work
  // runs inside the session's mount namespace, so paths, symlinks and
  // permissions are the session's; the journal names the session.
  std::shared_ptr<const pty::MountNamespace> mount = nullptr;
  std::string session;
  // What archive spools in the state directory count against (null: none).
  exec::StateBudget* state_budget = nullptr;
  // gate.queue, as this service's user and inside `mount` when there is one.
  int queue(WorkGate::Ticket& t, uv_work_cb work, uv_after_work_cb after) const {
    t.identity = identity;
    t.mount = mount;
    return gate.queue(ctx.loop, t, work, after);
  }
};

}  // namespace execd::files
