// execd/api/code: code interpreting. A code context is one Jupyter kernel
// (started from an installed kernelspec, spoken to over ZMTP through
// execd/kernel_channels) with its working directory; /code runs code in one.
// Each run is an execution (execd/exec) whose runner speaks to the kernel,
// so both framings behave as /command does, and a run has an id (the
// EXECD-RUN-ID header), a status, retained output, resume, a record and a
// journal entry like any command. The registry owns every context and the
// default context per kernelspec.
//
// One execution per context at a time: a second one gets 409 CONTEXT_BUSY at
// once (a kernel runs requests serially anyway; a hidden queue would make a
// client's timeout count someone else's code and hide a stuck context).
#pragma once

#include <cstddef>
#include <memory>

#include "execd/api/commands.h"
#include "execd/api/sessions.h"
#include "execd/context.h"
#include "execd/exec/registry.h"
#include "execd/routes.h"
#include "pty/runtime.h"

namespace execd::api {

class CodeRegistryImpl;

class CodeRegistry {
 public:
  CodeRegistry(const Context& ctx, pty::Runtime& runtime, exec::LaunchPath& launches);
  ~CodeRegistry();
  CodeRegistry(const CodeRegistry&) = delete;
  CodeRegistry& operator=(const CodeRegistry&) = delete;

  // Daemon shutdown: shutdown_request to every kernel (signals follow after
  // a grace period), then kill_all() when the daemon stops waiting.
  void shutdown_all();
  void kill_all();
  // Kernel processes not yet reaped.
  size_t kernels_alive() const;
  // Last step: lets go of every kernel, socket and handle.
  void close();

  CodeRegistryImpl* impl() { return impl_.get(); }

 private:
  std::unique_ptr<CodeRegistryImpl> impl_;
};

void add_code_routes(RouteTable& routes, CodeRegistry& code, CommandService& commands, SessionRegistry& sessions);
// E2B's code-interpreter server (POST /execute, /contexts...), on the E2B
// listeners: the same contexts and kernels, E2B's wire (protocol/e2b_code).
void add_e2b_code_routes(RouteTable& routes, CodeRegistry& code, CommandService& commands);

}  // namespace execd::api
