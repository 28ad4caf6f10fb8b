// execd/envd/process_start: see header.
#include "execd/envd/process_start.h"

#include <spdlog/spdlog.h>

#include "execd/http/connect_answers.h"
#include "execd/runners/command.h"

namespace execd::envd {

namespace wire = protocol::envd;
namespace cn = protocol::connect;

std::string command_line(const wire::ProcessConfig& c) {
  auto quote = [](const std::string& s) {
    bool plain = !s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                                   "_-./=:,+@%") == std::string::npos;
    if (plain) return s;
    std::string q = "'";
    for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    return q + "'";
  };
  std::string out = quote(c.cmd);
  for (const auto& a : c.args) out += " " + quote(a);
  return out;
}

// Past --envd-max-processes: resource_exhausted before anything is spawned.
static std::optional<protocol::ApiError> process_refusal(EnvdProcesses& svc) {
  if (svc.running() >= static_cast<size_t>(svc.ctx.config.envd_max_processes))
    return protocol::ApiError{429, "LIMIT_REACHED",
                              "too many processes: " + std::to_string(svc.ctx.config.envd_max_processes) +
                                  " are running (--envd-max-processes)"};
  return std::nullopt;
}

std::optional<protocol::ApiError> ProcessStart::admission() { return process_refusal(svc_); }
bool ProcessStart::prepare_blocks() const { return runners::process_needs_pool(svc_.ctx, start_); }
std::optional<protocol::ApiError> ProcessStart::prepare() { return runners::prepare_process_spawn(svc_.ctx, start_, opts_); }
std::optional<protocol::ApiError> ProcessStart::recheck() { return process_refusal(svc_); }

void ProcessStart::fill_spec(exec::ExecutionSpec& spec) {
  spec.cwd = opts_.cwd;
  if (opts_.uid) spec.uid = *opts_.uid;
  if (opts_.gid) spec.gid = *opts_.gid;
}

std::unique_ptr<exec::StreamFormat> ProcessStart::stream_format(http::Exchange&) {
  auto format = std::make_unique<exec::ProcessEventFormat>(0, start_.pty, keepalive_ms_, true);
  format_ = format.get();
  return format;
}

std::unique_ptr<exec::Runner> ProcessStart::start(exec::Execution& e, std::string& error) {
  pty::CommandLimits limits;
  // envd ends the process at the call's deadline (Connect-Timeout-Ms).
  limits.timeout_ms = static_cast<int64_t>(timeout_ms_);
  limits.kill_grace_ms = svc_.ctx.config.kill_grace_ms;
  auto runner = runners::CommandRunner::start(svc_.runtime, opts_, limits, keep_stdin(), e, error);
  if (runner) pid_ = static_cast<uint32_t>(runner->pgid());
  if (runner && format_) format_->set_pid(pid_);
  return runner;
}

void ProcessStart::started(exec::Execution& e, http::Exchange*) {
  EnvdProcesses::Entry entry;
  entry.exec_id = e.id();
  entry.config = req_.process;
  entry.tag = req_.tag;
  entry.pid = pid_;
  entry.pty = start_.pty;
  svc_.add(std::move(entry));
  spdlog::info("process {} started: pid {}{}", e.id(), pid_, start_.pty ? " (pty)" : "");
}

void ProcessStart::refuse(http::Exchange& client, const protocol::ApiError& why) {
  cn::Code code = why.status == 401   ? cn::Code::unauthenticated
                  : why.status == 429 ? cn::Code::resource_exhausted
                  : why.status == 503 ? cn::Code::unavailable
                                      : cn::Code::invalid_argument;
  http::rpc::stream_error(client, {code, why.message});
}

}  // namespace execd::envd
