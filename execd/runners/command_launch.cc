// execd/runners/command_launch: see header.
#include "execd/runners/command_launch.h"

#include <spdlog/spdlog.h>

#include "execd/exec/formats.h"
#include "execd/exec/registry.h"
#include "execd/runners/command.h"
#include "execd/runners/command_spawn.h"

namespace execd::runners {

namespace {

// What a command brings to a launch (exec/launch): its preparation (the
// environment, the user, the working directory: blocking when
// runners::needs_pool says so), its stream in the client's framing, and
// the command runner.
class CommandStart final : public exec::RunStart {
 public:
  CommandStart(const Context& ctx, pty::Runtime& runtime, protocol::CommandRequest req, protocol::Framing framing)
      : ctx_(ctx), runtime_(runtime), req_(std::move(req)), framing_(framing) {}
  bool prepare_blocks() const override { return runners::needs_pool(ctx_, req_); }
  std::optional<protocol::ApiError> prepare() override { return runners::prepare_spawn(ctx_, req_, opts_); }
  std::unique_ptr<exec::StreamFormat> stream_format(http::Exchange&) override {
    return exec::envelope_format(framing_);
  }
  std::vector<std::string> stream_headers(const exec::Execution&) override { return {}; }
  std::unique_ptr<exec::Runner> start(exec::Execution& e, std::string& error) override {
    pty::CommandLimits limits;
    limits.timeout_ms = req_.timeout_ms;
    limits.kill_grace_ms = ctx_.config.kill_grace_ms;
    limits.resources.memory_bytes = req_.limit_memory_bytes;
    limits.resources.pids = req_.limit_pids;
    limits.resources.cpu_shares = req_.limit_cpu_shares;
    auto runner = runners::CommandRunner::start(runtime_, opts_, limits, req_.stdin_open, e, error);
    if (runner)
      spdlog::info("command {} started: pid {}{}", e.id(), runner->pgid(), req_.background ? " (background)" : "");
    return runner;
  }

 private:
  const Context& ctx_;
  pty::Runtime& runtime_;
  protocol::CommandRequest req_;
  protocol::Framing framing_;
  pty::SpawnOptions opts_;
};

}  // namespace

std::unique_ptr<exec::RunStart> command_start(const Context& ctx, pty::Runtime& runtime, protocol::CommandRequest req,
                                              protocol::Framing framing) {
  return std::make_unique<CommandStart>(ctx, runtime, std::move(req), framing);
}

exec::ExecutionSpec command_spec(const protocol::CommandRequest& req, std::string fingerprint) {
  exec::ExecutionSpec spec;
  spec.kind = exec::Kind::command;
  spec.id = req.id;
  spec.content = protocol::command_text(req);
  spec.argv = req.argv;
  spec.fingerprint = std::move(fingerprint);
  spec.cwd = req.cwd;
  spec.uid = req.uid;
  spec.gid = req.gid;
  spec.background = req.background;
  spec.tty = req.tty;
  spec.stdin_open = req.stdin_open;
  spec.track_changes = req.track_changes;
  return spec;
}

bool start_trusted_command(const Context& ctx, pty::Runtime& runtime, exec::LaunchPath& launches,
                           protocol::CommandRequest req, std::string& error) {
  exec::Registry& executions = launches.executions();
  if (!executions.accepting()) {
    error = "execd is shutting down";
    return false;
  }
  if (!req.id.empty() && executions.contains(req.id)) {
    error = "id " + req.id + " is in use";
    return false;
  }
  req.background = true;
  exec::ExecutionSpec spec = command_spec(req, protocol::request_fingerprint(req));
  if (auto refused = launches.launch(nullptr, std::move(spec),
                                     command_start(ctx, runtime, std::move(req), protocol::Framing::exact))) {
    error = refused->message;
    return false;
  }
  return true;
}

}  // namespace execd::runners
