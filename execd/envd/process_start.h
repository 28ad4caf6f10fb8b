// execd/envd/process_start: what an E2B Start (api/envd/process) brings to
// a launch (exec/launch): envd's way of preparing a process
// (runners/command_spawn), its events in Connect envelopes
// (exec/format_envd), the command runner, and its entry in the pid and tag
// table (envd/processes). Refusals are Connect errors at the end of the
// stream; past --envd-max-processes (every kind of run together is
// --max-running, which the launch path checks) the refusal is
// resource_exhausted before anything is spawned.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "execd/envd/processes.h"
#include "execd/exec/formats.h"
#include "execd/exec/launch.h"
#include "execd/runners/command_spawn.h"
#include "protocol/envd.h"

namespace execd::envd {

// `/bin/bash -l -c 'echo hi'`: the command line a record and the journal show.
std::string command_line(const protocol::envd::ProcessConfig& c);

class ProcessStart final : public exec::RunStart {
 public:
  // timeout_ms: the call's deadline (Connect-Timeout-Ms; 0: none);
  // keepalive_ms: its Keepalive-Ping-Interval (0: not asked).
  ProcessStart(EnvdProcesses& svc, protocol::envd::StartRequest req, uint64_t timeout_ms, uint64_t keepalive_ms,
               runners::ProcessStart start)
      : svc_(svc), req_(std::move(req)), timeout_ms_(timeout_ms), keepalive_ms_(keepalive_ms),
        start_(std::move(start)) {}
  std::optional<protocol::ApiError> admission() override;
  bool prepare_blocks() const override;
  std::optional<protocol::ApiError> prepare() override;
  // Others may have started while this one was prepared.
  std::optional<protocol::ApiError> recheck() override;
  void fill_spec(exec::ExecutionSpec& spec) override;
  std::unique_ptr<exec::StreamFormat> stream_format(http::Exchange&) override;
  std::unique_ptr<exec::Runner> start(exec::Execution& e, std::string& error) override;
  void started(exec::Execution& e, http::Exchange*) override;
  void refuse(http::Exchange& client, const protocol::ApiError& why) override;
  bool keep_stdin() const { return start_.pty || req_.stdin_open.value_or(true); }

 private:
  EnvdProcesses& svc_;
  protocol::envd::StartRequest req_;
  uint64_t timeout_ms_, keepalive_ms_;
  runners::ProcessStart start_;
  pty::SpawnOptions opts_;
  exec::ProcessEventFormat* format_ = nullptr;  // the client's stream, owned by its reader
  uint32_t pid_ = 0;
};

}  // namespace execd::envd
