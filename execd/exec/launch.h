// execd/exec/launch: the one way into the execution model. Every kind of
// run (a command, a bash session run, code in a kernel, an E2B process, an
// isolated run, a lifecycle hook) starts here, in the same steps:
//
//   1. admission: refused while execd shuts down, past --max-running, or
//      past what the kind itself caps (RunStart::admission);
//   2. the id is reserved: the execution exists and is "starting" (a
//      retried start with the same id attaches to it from here on);
//   3. the kind's preparation (user lookups, a script file: on the pool
//      when it may block);
//   4. track_changes: the watches on the run's roots, before anything runs;
//   5. the kind's last checks on the loop (a session that became busy
//      meanwhile), then the client's original stream (the first reader);
//   6. the kind's runner starts the processes; the execution starts.
//
// A refusal at 1-5 reaches the client in its dialect (RunStart::refuse)
// and forgets the reserved id, telling whoever attached meanwhile. A runner
// that cannot start is the run's own result (a 200 stream with init, then
// the error: the Go daemon's way), unless the kind answers start failures
// as HTTP errors (RunStart::start_failure_refuses).
//
// A client that leaves while the launch waits (steps 3 and 4) withdraws it,
// unless the run goes on without it (a command started under an id of the
// client's: its retry attaches).
//
// Ownership: a launch owns itself from launch() until step 6 or a refusal
// (the pool job, the tracker's callback and the client's wait each hold it
// in turn); the execution is the registry's from step 2. Loop thread only.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "execd/exec/track_changes.h"
#include "execd/exec/execution.h"
#include "execd/exec/reader.h"
#include "execd/http/exchange.h"
#include "protocol/errors.h"

namespace execd::exec {

class Registry;

// What one kind of run brings to a launch: one object per start.
class RunStart {
 public:
  virtual ~RunStart() = default;
  // Step 1: what this kind caps besides --max-running.
  virtual std::optional<protocol::ApiError> admission() { return std::nullopt; }
  // Step 3: on a pool thread when prepare_blocks(), else on the loop.
  virtual bool prepare_blocks() const { return false; }
  virtual std::optional<protocol::ApiError> prepare() { return std::nullopt; }
  // Step 4: whose view of the paths the watches take (an isolated session's).
  virtual watch::MountRef track_mount() const { return nullptr; }
  // Step 5: what may have changed while it waited.
  virtual std::optional<protocol::ApiError> recheck() { return std::nullopt; }
  // Step 5: what only the preparation found out (the working directory
  // and ids a user lookup gave), into the reserved execution's spec.
  virtual void fill_spec(ExecutionSpec& spec) {}
  // Step 5: the client's original stream; nullptr: the run answers in
  // started() instead (an isolated background run's 202).
  virtual std::unique_ptr<StreamFormat> stream_format(http::Exchange& client) = 0;
  virtual std::vector<std::string> stream_headers(const Execution& e) { return {"EXECD-RUN-ID: " + e.id()}; }
  // Step 6: starts the run's processes; nullptr with `error` when it cannot.
  virtual std::unique_ptr<Runner> start(Execution& e, std::string& error) = 0;
  // Step 6, after Execution::start: what else the start leaves behind (a
  // pid table entry, a session's last run, an answer that is no stream).
  virtual void started(Execution& e, http::Exchange* client) {}
  // A refusal before anything ran, in the client's dialect (default:
  // execd's JSON error).
  virtual void refuse(http::Exchange& client, const protocol::ApiError& why);
  // A runner that could not start is answered with refuse() (500) rather
  // than in the run's own stream.
  virtual bool start_failure_refuses() const { return false; }
};

struct LaunchSettings {
  size_t max_running = 4096;
  TrackLimits track;
};

class LaunchPath {
 public:
  LaunchPath(Registry& executions, watch::Hub& watches, LaunchSettings settings)
      : executions_(executions), watches_(watches), settings_(settings) {}

  // Starts a run of `spec` for `client` (null: nobody waits, as for a
  // lifecycle hook). `goes_on_without_client`: a client that leaves does
  // not withdraw it. `log_limit` 0: the registry's. Returns the refusal
  // when admission refused it (step 1; the client has been answered).
  std::optional<protocol::ApiError> launch(http::Exchange* client, ExecutionSpec spec, std::unique_ptr<RunStart> start,
                                           bool goes_on_without_client = false, uint64_t log_limit = 0);

  Registry& executions() { return executions_; }

 private:
  struct Launch;
  void prepared(std::unique_ptr<Launch> l);
  void tracked(std::unique_ptr<Launch> l);
  void refuse(Launch& l, const protocol::ApiError& why);

  Registry& executions_;
  watch::Hub& watches_;
  LaunchSettings settings_;
};

}  // namespace execd::exec
