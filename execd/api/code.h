// execd/api/code: code interpreting. A code context is one Jupyter kernel
// (started from an installed kernelspec, spoken to over ZeroMQ through
// execd/kernel_channels) with its working directory; /code runs code in one
// and streams what the kernel publishes through an ExecutionStream, so both
// framings behave as /command does. The registry owns every context, the
// default context per kernelspec, and the ZeroMQ context.
//
// One execution per context at a time: a second one gets 409 CONTEXT_BUSY at
// once (a kernel runs requests serially anyway; a hidden queue would make a
// client's timeout count someone else's code and hide a stuck context).
//
// Built without libzmq (the static build), every /code route answers 501.
#pragma once

#include <cstddef>
#include <memory>

#include "execd/context.h"

namespace execd::api {

class CodeRegistryImpl;

class CodeRegistry {
 public:
  explicit CodeRegistry(Context& ctx);
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

}  // namespace execd::api
