// pty/runtime: what starting any process needs from the daemon, in one
// reference handed to whoever starts processes: the loop, the one reaper,
// the containment (cgroups) and what every child gets back (ChildSetup).
// Owned by the Daemon; never a global.
#pragma once

#include <uv.h>

#include "pty/cgroup.h"
#include "pty/reaper.h"
#include "pty/spawn.h"

namespace execd::pty {

struct Runtime {
  uv_loop_t* loop;
  Reaper& reaper;
  Containment& containment;
  const ChildSetup& children;
};

}  // namespace execd::pty
