// execd/api/envd/process: see header.
//   POST /process.Process/Start        server stream: start, data..., end (keepalives between)
//   POST /process.Process/Connect      server stream: the same, replayed from the first byte kept
//   POST /process.Process/List         running processes
//   POST /process.Process/SendInput    bytes to stdin (or the PTY)
//   POST /process.Process/StreamInput  client stream: start{selector}, data...
//   POST /process.Process/CloseStdin   EOF (a PTY gets ^D)
//   POST /process.Process/SendSignal   SIGTERM / SIGKILL to the process, or to all it started
//   POST /process.Process/Update       PTY size
#include "execd/api/envd/process.h"

#include <signal.h>

#include <memory>
#include <tuple>
#include <vector>

#include "execd/api/envd/connect_rpc.h"
#include "execd/envd/process_input.h"
#include "execd/envd/process_start.h"
#include "execd/exec/formats.h"
#include "execd/exec/reader.h"
#include "execd/limits.h"

namespace execd::api {

using ::execd::envd::EnvdProcesses;
namespace envd = protocol::envd;
namespace cn = protocol::connect;
using rpc::CallInfo;

// Named, not anonymous: the unity build puts this file in one translation
// unit with the other api/ files.
namespace envd_process_impl {

using ::execd::envd::process_not_found;

// --- helpers ------------------------------------------------------------------

template <class T>
bool decoded(http::Exchange& ex, std::variant<T, protocol::DecodeError>& v, bool streaming) {
  if (auto* err = std::get_if<protocol::DecodeError>(&v)) {
    cn::Error e{cn::Code::invalid_argument, err->message};
    if (streaming) rpc::stream_error(ex, e);
    else rpc::respond_error(ex, e);
    return false;
  }
  return true;
}

// --- Start --------------------------------------------------------------------

void handle_start(EnvdProcesses& svc, http::Exchange& ex, std::string_view message, const CallInfo& info) {
  auto d = envd::decode_start(message);
  if (!decoded(ex, d, true)) return;
  envd::StartRequest req = std::move(std::get<envd::StartRequest>(d));
  runners::ProcessStart start;
  start.cmd = req.process.cmd;
  start.args = req.process.args;
  start.envs = req.process.envs;
  start.cwd = req.process.cwd;
  start.user = info.user;
  if (req.pty) {
    start.pty = true;
    if (req.pty->rows) start.rows = static_cast<uint16_t>(std::min<uint32_t>(req.pty->rows, 0xffff));
    if (req.pty->cols) start.cols = static_cast<uint16_t>(std::min<uint32_t>(req.pty->cols, 0xffff));
  }
  exec::ExecutionSpec spec;
  spec.kind = exec::Kind::process;
  spec.content = ::execd::envd::command_line(req.process);
  spec.fingerprint = "envd-process";
  spec.tty = start.pty;
  auto run = std::make_unique<::execd::envd::ProcessStart>(svc, std::move(req), info.timeout_ms, info.keepalive_ms,
                                                            std::move(start));
  spec.stdin_open = run->keep_stdin();
  svc.launches.launch(&ex, std::move(spec), std::move(run));
}

// --- Connect ------------------------------------------------------------------

void handle_connect(EnvdProcesses& svc, http::Exchange& ex, std::string_view message, const CallInfo& info) {
  auto d = envd::decode_selector_request(message);
  if (!decoded(ex, d, true)) return;
  const envd::ProcessSelector& sel = std::get<envd::SelectorRequest>(d).process;
  EnvdProcesses::Entry* p = svc.find(sel);
  exec::Execution* e = p ? svc.execution(*p) : nullptr;
  if (!e) return rpc::stream_error(ex, process_not_found(sel));
  if (auto r = refuse_past(svc.executions.readers(), svc.ctx.config.max_readers, "resume readers", "max-readers"))
    return rpc::stream_error(ex, {cn::Code::resource_exhausted, r->message});
  // From the first byte still kept: what was written while nobody was
  // attached arrives too (envd drops it).
  auto reader = std::make_unique<exec::ExecutionReader>(
      ex, *e, exec::ExecutionReader::Role::resume,
      std::make_unique<exec::ProcessEventFormat>(p->pid, p->pty, info.keepalive_ms, false), 0, 0,
      std::vector<std::string>{"EXECD-RUN-ID: " + e->id()});
  exec::ExecutionReader& r = *reader;
  ex.attach(std::move(reader));
  if (!e->starting()) r.begin();
}

// --- List ---------------------------------------------------------------------

void handle_list(EnvdProcesses& svc, http::Exchange& ex, std::string_view message) {
  if (auto err = envd::decode_empty(message)) return rpc::respond_error(ex, {cn::Code::invalid_argument, err->message});
  std::vector<envd::ProcessInfo> out;
  svc.each([&](EnvdProcesses::Entry& p) {
    exec::Execution* e = svc.execution(p);
    if (!e || !e->running()) return;
    out.push_back(envd::ProcessInfo{p.config, p.pid, p.tag});
  });
  rpc::respond(ex, envd::list_response(out));
}

// --- input (execd/envd/process_input) -----------------------------------------

void handle_send_input(EnvdProcesses& svc, http::Exchange& ex, std::string_view message) {
  auto d = envd::decode_send_input(message);
  if (!decoded(ex, d, false)) return;
  auto& req = std::get<envd::SendInputRequest>(d);
  EnvdProcesses::Entry* p = svc.find(req.process);
  exec::Execution* e = p ? svc.execution(*p) : nullptr;
  if (!e) return rpc::respond_error(ex, process_not_found(req.process));
  if (auto refused = ::execd::envd::input_refused(*e, p->pid)) return rpc::respond_error(ex, *refused);
  e->stdin_write(req.input.data.data(), req.input.data.size());
  if (e->stdin_queued() <= ::execd::envd::kStdinQueue) return rpc::respond(ex, "{}");
  ex.attach(std::make_unique<::execd::envd::InputWaiter>(svc, ex, e->id()));
}

void handle_close_stdin(EnvdProcesses& svc, http::Exchange& ex, std::string_view message) {
  auto d = envd::decode_selector_request(message);
  if (!decoded(ex, d, false)) return;
  const auto& sel = std::get<envd::SelectorRequest>(d).process;
  EnvdProcesses::Entry* p = svc.find(sel);
  exec::Execution* e = p ? svc.execution(*p) : nullptr;
  if (!e) return rpc::respond_error(ex, process_not_found(sel));
  if (!e->stdin_open())
    return rpc::respond_error(ex, {cn::Code::failed_precondition,
                                   "stdin of process " + std::to_string(p->pid) + " is not open"});
  e->stdin_close();
  rpc::respond(ex, "{}");
}

// --- signals and size ---------------------------------------------------------

void handle_send_signal(EnvdProcesses& svc, http::Exchange& ex, std::string_view message) {
  auto d = envd::decode_send_signal(message);
  if (!decoded(ex, d, false)) return;
  auto& req = std::get<envd::SendSignalRequest>(d);
  if (req.signal != SIGTERM && req.signal != SIGKILL)
    return rpc::respond_error(ex, {cn::Code::invalid_argument, "signal must be SIGNAL_SIGTERM or SIGNAL_SIGKILL"});
  EnvdProcesses::Entry* p = svc.find(req.process);
  exec::Execution* e = p ? svc.execution(*p) : nullptr;
  if (!e) return rpc::respond_error(ex, process_not_found(req.process));
  // descendants (infra PR 3617): everything the process started, its
  // process group and the rest of its cgroup or keeper tree (setsid()
  // children too, which envd's group signal misses), also after the leader
  // has exited. Without it, envd signals the leader alone; execd does so
  // with --envd-signal-scope leader, and by default reaches everything as
  // kill() always has here (a released SDK cannot ask for descendants).
  bool everything =
      req.descendants || svc.ctx.config.envd_signal_scope == Config::EnvdSignalScope::run;
  if (!e->send_signal(req.signal, everything ? exec::SignalScope::everything : exec::SignalScope::leader))
    return rpc::respond_error(ex, {cn::Code::not_found,
                                   "process with pid " + std::to_string(p->pid) + " is not running"});
  rpc::respond(ex, "{}");
}

void handle_update(EnvdProcesses& svc, http::Exchange& ex, std::string_view message) {
  auto d = envd::decode_update(message);
  if (!decoded(ex, d, false)) return;
  auto& req = std::get<envd::UpdateRequest>(d);
  EnvdProcesses::Entry* p = svc.find(req.process);
  exec::Execution* e = p ? svc.execution(*p) : nullptr;
  if (!e) return rpc::respond_error(ex, process_not_found(req.process));
  if (req.pty) {
    if (!p->pty)
      return rpc::respond_error(ex, {cn::Code::failed_precondition,
                                     "process " + std::to_string(p->pid) + " has no PTY to resize"});
    if (!req.pty->rows || !req.pty->cols || req.pty->rows > 0xffff || req.pty->cols > 0xffff)
      return rpc::respond_error(ex, {cn::Code::invalid_argument, "pty size needs rows and cols between 1 and 65535"});
    e->resize(static_cast<uint16_t>(req.pty->rows), static_cast<uint16_t>(req.pty->cols));
  }
  rpc::respond(ex, "{}");
}

}  // namespace envd_process_impl

void add_envd_process_routes(RouteTable& routes, EnvdProcesses& svc) {
  namespace impl = envd_process_impl;
  const std::string base = "/process.Process/";
  using Unary = void (*)(EnvdProcesses&, http::Exchange&, std::string_view);
  using Stream = void (*)(EnvdProcesses&, http::Exchange&, std::string_view, const CallInfo&);
  // Start, SendInput and StreamInput start or feed a process: refused while frozen.
  for (auto [name, h, rules] : {std::tuple<const char*, Stream, RouteRules>{"Start", impl::handle_start, kStartsProcesses},
                                {"Connect", impl::handle_connect, {}}})
    rpc::add_server_stream(
        routes, base + name, [&svc, h](http::Exchange& ex, std::string_view m, const CallInfo& i) { h(svc, ex, m, i); },
        rules);
  for (auto [name, h, rules] :
       {std::tuple<const char*, Unary, RouteRules>{"List", impl::handle_list, {}},
        {"SendInput", impl::handle_send_input, kStartsProcesses},
        {"CloseStdin", impl::handle_close_stdin, {}},
        {"SendSignal", impl::handle_send_signal, {}},
        {"Update", impl::handle_update, {}}})
    rpc::add_unary(
        routes, base + name, [&svc, h](http::Exchange& ex, std::string_view m, const CallInfo&) { h(svc, ex, m); },
        rules);
  rpc::add_client_stream(
      routes, base + "StreamInput",
      [&svc](http::Exchange& ex, const CallInfo&) {
        auto body = std::make_unique<::execd::envd::StreamInputBody>(svc, ex);
        ::execd::envd::StreamInputBody& b = *body;
        ex.attach(std::move(body));
        ex.on_complete = [&b](http::Exchange&) { b.complete(); };
      },
      [](http::Exchange&) {}, kStartsProcesses);
}

}  // namespace execd::api
