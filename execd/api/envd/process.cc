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
#include <spdlog/spdlog.h>

#include <memory>
#include <tuple>
#include <vector>

#include "execd/api/envd/connect_rpc.h"
#include "execd/exec/formats.h"
#include "execd/exec/reader.h"
#include "execd/http/connection.h"
#include "execd/limits.h"
#include "execd/runners/command.h"
#include "execd/runners/command_spawn.h"

namespace execd::api {

namespace envd = protocol::envd;
namespace cn = protocol::connect;
using rpc::CallInfo;

// Named, not anonymous: the unity build puts this file in one translation
// unit with the other api/ files.
namespace envd_process_impl {

constexpr size_t kStdinQueue = 256 << 10;             // input waiting for the process before a writer waits

// --- helpers ------------------------------------------------------------------

cn::Error not_found(const envd::ProcessSelector& sel) {
  return {cn::Code::not_found, sel.pid ? "process with pid " + std::to_string(*sel.pid) + " not found"
                               : sel.tag ? "process with tag " + *sel.tag + " not found"
                                         : std::string("no process selected (give a pid or a tag)")};
}

// `/bin/bash -l -c 'echo hi'`: the command line a record and the journal show.
std::string command_line(const envd::ProcessConfig& c) {
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

// Past --envd-max-processes (every kind of run together is --max-running,
// which the launch path checks): resource_exhausted before anything is
// spawned.
std::optional<protocol::ApiError> process_refusal(EnvdProcesses& svc) {
  if (svc.running() >= static_cast<size_t>(svc.ctx.config.envd_max_processes))
    return protocol::ApiError{429, "LIMIT_REACHED",
                              "too many processes: " + std::to_string(svc.ctx.config.envd_max_processes) +
                                  " are running (--envd-max-processes)"};
  return std::nullopt;
}

// What an E2B Start brings to a launch (exec/launch): envd's way of
// preparing a process (runners/command_spawn), its events in Connect
// envelopes, the command runner, and its entry in the pid and tag table.
// Refusals are Connect errors at the end of the stream.
class ProcessStart final : public exec::RunStart {
 public:
  ProcessStart(EnvdProcesses& svc, envd::StartRequest req, const CallInfo& info, runners::ProcessStart start)
      : svc_(svc), req_(std::move(req)), info_(info), start_(std::move(start)) {}
  std::optional<protocol::ApiError> admission() override { return process_refusal(svc_); }
  bool prepare_blocks() const override { return runners::process_needs_pool(svc_.ctx, start_); }
  std::optional<protocol::ApiError> prepare() override {
    return runners::prepare_process_spawn(svc_.ctx, start_, opts_);
  }
  // Others may have started while this one was prepared.
  std::optional<protocol::ApiError> recheck() override { return process_refusal(svc_); }
  void fill_spec(exec::ExecutionSpec& spec) override {
    spec.cwd = opts_.cwd;
    if (opts_.uid) spec.uid = *opts_.uid;
    if (opts_.gid) spec.gid = *opts_.gid;
  }
  std::unique_ptr<exec::StreamFormat> stream_format(http::Exchange&) override {
    auto format = std::make_unique<exec::ProcessEventFormat>(0, start_.pty, info_.keepalive_ms, true);
    format_ = format.get();
    return format;
  }
  std::unique_ptr<exec::Runner> start(exec::Execution& e, std::string& error) override {
    pty::CommandLimits limits;
    // envd ends the process at the call's deadline (Connect-Timeout-Ms).
    limits.timeout_ms = static_cast<int64_t>(info_.timeout_ms);
    limits.kill_grace_ms = svc_.ctx.config.kill_grace_ms;
    auto runner = runners::CommandRunner::start(svc_.runtime, opts_, limits, keep_stdin(), e, error);
    if (runner) pid_ = static_cast<uint32_t>(runner->pgid());
    if (runner && format_) format_->set_pid(pid_);
    return runner;
  }
  void started(exec::Execution& e, http::Exchange*) override {
    EnvdProcesses::Entry entry;
    entry.exec_id = e.id();
    entry.config = req_.process;
    entry.tag = req_.tag;
    entry.pid = pid_;
    entry.pty = start_.pty;
    svc_.add(std::move(entry));
    spdlog::info("process {} started: pid {}{}", e.id(), pid_, start_.pty ? " (pty)" : "");
  }
  void refuse(http::Exchange& client, const protocol::ApiError& why) override {
    cn::Code code = why.status == 401   ? cn::Code::unauthenticated
                    : why.status == 429 ? cn::Code::resource_exhausted
                    : why.status == 503 ? cn::Code::unavailable
                                        : cn::Code::invalid_argument;
    rpc::stream_error(client, {code, why.message});
  }
  bool keep_stdin() const { return start_.pty || req_.stdin_open.value_or(true); }

 private:
  EnvdProcesses& svc_;
  envd::StartRequest req_;
  CallInfo info_;
  runners::ProcessStart start_;
  pty::SpawnOptions opts_;
  exec::ProcessEventFormat* format_ = nullptr;  // the client's stream, owned by its reader
  uint32_t pid_ = 0;
};

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
  spec.content = command_line(req.process);
  spec.fingerprint = "envd-process";
  spec.tty = start.pty;
  auto run = std::make_unique<ProcessStart>(svc, std::move(req), info, std::move(start));
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
  if (!e) return rpc::stream_error(ex, not_found(sel));
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

// --- input --------------------------------------------------------------------

// A SendInput that put the process's queue over kStdinQueue: answered once
// the process has read it down (checked on the server tick), or with an
// error after --stdin-timeout.
class InputWaiter final : public http::Source {
 public:
  InputWaiter(EnvdProcesses& svc, http::Exchange& ex, std::string exec_id)
      : svc_(svc), ex_(ex), exec_id_(std::move(exec_id)), since_(ex.connection().host().now_ms()) {}
  void tick(uint64_t now_ms) override {
    exec::Execution* e = svc_.executions.find(exec_id_);
    if (!e || !e->running() || e->stdin_queued() <= kStdinQueue) return rpc::respond(ex_, "{}");
    int64_t limit = svc_.ctx.config.stdin_timeout_ms;
    if (limit >= 0 && now_ms - since_ >= static_cast<uint64_t>(limit))
      rpc::respond_error(ex_, {cn::Code::deadline_exceeded,
                               "the process is not reading its input (waited " + std::to_string(limit) + " ms)"});
  }

 private:
  EnvdProcesses& svc_;
  http::Exchange& ex_;
  std::string exec_id_;
  uint64_t since_;
};

// Why input cannot go to `e` now, if it cannot.
std::optional<cn::Error> input_refused(const exec::Execution& e, uint32_t pid) {
  if (!e.stdin_open())
    return cn::Error{cn::Code::failed_precondition,
                     "stdin of process " + std::to_string(pid) + " is not open (start it with stdin: true)"};
  if (!e.running()) return cn::Error{cn::Code::not_found, "process with pid " + std::to_string(pid) + " has exited"};
  if (!e.stdin_writable())
    return cn::Error{cn::Code::failed_precondition, "stdin of process " + std::to_string(pid) + " is closed"};
  return std::nullopt;
}

void handle_send_input(EnvdProcesses& svc, http::Exchange& ex, std::string_view message) {
  auto d = envd::decode_send_input(message);
  if (!decoded(ex, d, false)) return;
  auto& req = std::get<envd::SendInputRequest>(d);
  EnvdProcesses::Entry* p = svc.find(req.process);
  exec::Execution* e = p ? svc.execution(*p) : nullptr;
  if (!e) return rpc::respond_error(ex, not_found(req.process));
  if (auto refused = input_refused(*e, p->pid)) return rpc::respond_error(ex, *refused);
  e->stdin_write(req.input.data.data(), req.input.data.size());
  if (e->stdin_queued() <= kStdinQueue) return rpc::respond(ex, "{}");
  ex.attach(std::make_unique<InputWaiter>(svc, ex, e->id()));
}

// StreamInput's request body: start{process}, then data messages, written
// to the process as they come; the body is paused while more than
// kStdinQueue bytes wait for the process (checked on the server tick).
class StreamInputBody final : public http::Source {
 public:
  StreamInputBody(EnvdProcesses& svc, http::Exchange& ex)
      : svc_(svc), ex_(ex), reader_(static_cast<size_t>(svc.ctx.config.max_body_bytes)) {}

  void on_body(const char* data, size_t len) override {
    if (failed_) return;
    bool ok = reader_.feed(std::string_view(data, len), [this](const cn::EnvelopeReader::Message& m) {
      if (m.flags & cn::kFlagEndStream) return true;
      return message(m.payload);
    });
    if (!ok && !failed_) fail({cn::Code::invalid_argument, "malformed request stream: " + reader_.error()});
  }

  void complete() {
    if (failed_) return;
    if (!reader_.finish()) return fail({cn::Code::invalid_argument, "malformed request stream: " + reader_.error()});
    if (exec_id_.empty()) return fail({cn::Code::invalid_argument, "the input stream had no start message"});
    rpc::begin_stream(ex_);
    std::string out = ex_.take_buffer();
    rpc::append_message(out, [](std::string& o) { o += "{}"; });
    cn::append_end_stream(out, nullptr);
    ex_.end(std::move(out));
  }

  void tick(uint64_t now_ms) override {
    if (!paused_ || failed_) return;
    exec::Execution* e = svc_.executions.find(exec_id_);
    if (!e || !e->running()) return fail({cn::Code::not_found, "the process has exited"});
    if (e->stdin_queued() <= kStdinQueue) {
      paused_ = false;
      ex_.resume_body();
      return;
    }
    int64_t limit = svc_.ctx.config.stdin_timeout_ms;
    if (limit >= 0 && now_ms - paused_since_ >= static_cast<uint64_t>(limit))
      fail({cn::Code::deadline_exceeded,
            "the process is not reading its input (waited " + std::to_string(limit) + " ms)"});
  }

 private:
  bool message(std::string_view payload) {
    auto d = envd::decode_stream_input(payload);
    if (auto* err = std::get_if<protocol::DecodeError>(&d)) {
      fail({cn::Code::invalid_argument, err->message});
      return false;
    }
    auto& ev = std::get<envd::StreamInputEvent>(d);
    using Kind = envd::StreamInputEvent::Kind;
    if (ev.kind == Kind::start) {
      EnvdProcesses::Entry* p = svc_.find(ev.process);
      exec::Execution* e = p ? svc_.execution(*p) : nullptr;
      if (!e) {
        fail(not_found(ev.process));
        return false;
      }
      if (auto refused = input_refused(*e, p->pid)) {
        fail(*refused);
        return false;
      }
      exec_id_ = e->id();
      pid_ = p->pid;
      return true;
    }
    if (ev.kind != Kind::data) return true;  // keepalives
    exec::Execution* e = exec_id_.empty() ? nullptr : svc_.executions.find(exec_id_);
    if (!e) {
      fail({cn::Code::invalid_argument, "input before the start message"});
      return false;
    }
    if (auto refused = input_refused(*e, pid_)) {
      fail(*refused);
      return false;
    }
    e->stdin_write(ev.input.data.data(), ev.input.data.size());
    if (!paused_ && e->stdin_queued() > kStdinQueue) {
      paused_ = true;
      paused_since_ = ex_.connection().host().now_ms();
      ex_.pause_body();
    }
    return true;
  }

  // Answered at once; the rest of the body is not read (the connection
  // closes after the answer).
  void fail(const cn::Error& e) {
    if (failed_) return;
    failed_ = true;
    if (paused_) ex_.resume_body();
    paused_ = false;
    rpc::stream_error(ex_, e);
  }

  EnvdProcesses& svc_;
  http::Exchange& ex_;
  cn::EnvelopeReader reader_;
  std::string exec_id_;
  uint32_t pid_ = 0;
  bool paused_ = false, failed_ = false;
  uint64_t paused_since_ = 0;
};

void handle_close_stdin(EnvdProcesses& svc, http::Exchange& ex, std::string_view message) {
  auto d = envd::decode_selector_request(message);
  if (!decoded(ex, d, false)) return;
  const auto& sel = std::get<envd::SelectorRequest>(d).process;
  EnvdProcesses::Entry* p = svc.find(sel);
  exec::Execution* e = p ? svc.execution(*p) : nullptr;
  if (!e) return rpc::respond_error(ex, not_found(sel));
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
  if (!e) return rpc::respond_error(ex, not_found(req.process));
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
  if (!e) return rpc::respond_error(ex, not_found(req.process));
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

// --- the table ----------------------------------------------------------------

EnvdProcesses::Entry* EnvdProcesses::find(const envd::ProcessSelector& sel) {
  uint32_t pid = 0;
  if (sel.pid) {
    pid = *sel.pid;
  } else if (sel.tag) {
    auto t = by_tag_.find(*sel.tag);
    if (t == by_tag_.end()) return nullptr;
    pid = t->second;
  } else {
    return nullptr;
  }
  auto it = by_pid_.find(pid);
  if (it == by_pid_.end()) return nullptr;
  if (!execution(it->second)) {
    // Let go of by the registry (--retention): gone here too.
    if (it->second.tag) by_tag_.erase(*it->second.tag);
    by_pid_.erase(it);
    return nullptr;
  }
  return &it->second;
}

void EnvdProcesses::add(Entry e) {
  if (by_pid_.size() >= executions_kept_hint()) prune();
  uint32_t pid = e.pid;
  if (auto old = by_pid_.find(pid); old != by_pid_.end() && old->second.tag) {
    // The pid came round again: the older process is no longer reachable by it.
    auto t = by_tag_.find(*old->second.tag);
    if (t != by_tag_.end() && t->second == pid) by_tag_.erase(t);
  }
  if (e.tag) by_tag_[*e.tag] = pid;
  by_pid_[pid] = std::move(e);
}

size_t EnvdProcesses::running() {
  size_t n = 0;
  for (auto& [pid, e] : by_pid_)
    if (exec::Execution* x = execution(e); x && x->running()) ++n;
  return n;
}

void EnvdProcesses::prune() {
  for (auto it = by_pid_.begin(); it != by_pid_.end();) {
    if (execution(it->second)) {
      ++it;
      continue;
    }
    if (it->second.tag) {
      auto t = by_tag_.find(*it->second.tag);
      if (t != by_tag_.end() && t->second == it->first) by_tag_.erase(t);
    }
    it = by_pid_.erase(it);
  }
}

size_t EnvdProcesses::executions_kept_hint() const { return ctx.config.max_records + 1024; }

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
        auto body = std::make_unique<impl::StreamInputBody>(svc, ex);
        impl::StreamInputBody& b = *body;
        ex.attach(std::move(body));
        ex.on_complete = [&b](http::Exchange&) { b.complete(); };
      },
      [](http::Exchange&) {}, kStartsProcesses);
}

}  // namespace execd::api
