// execd/envd/process_input: see header.
#include "execd/envd/process_input.h"

#include "execd/http/connect_answers.h"
#include "execd/http/connection.h"

namespace execd::envd {

namespace wire = protocol::envd;
namespace cn = protocol::connect;
namespace rpc = http::rpc;

std::optional<cn::Error> input_refused(const exec::Execution& e, uint32_t pid) {
  if (!e.stdin_open())
    return cn::Error{cn::Code::failed_precondition,
                     "stdin of process " + std::to_string(pid) + " is not open (start it with stdin: true)"};
  if (!e.running()) return cn::Error{cn::Code::not_found, "process with pid " + std::to_string(pid) + " has exited"};
  if (!e.stdin_writable())
    return cn::Error{cn::Code::failed_precondition, "stdin of process " + std::to_string(pid) + " is closed"};
  return std::nullopt;
}

InputWaiter::InputWaiter(EnvdProcesses& svc, http::Exchange& ex, std::string exec_id)
    : svc_(svc), ex_(ex), exec_id_(std::move(exec_id)), since_(ex.connection().host().now_ms()) {}

void InputWaiter::tick(uint64_t now_ms) {
  exec::Execution* e = svc_.executions.find(exec_id_);
  if (!e || !e->running() || e->stdin_queued() <= kStdinQueue) return rpc::respond(ex_, "{}");
  int64_t limit = svc_.ctx.config.stdin_timeout_ms;
  if (limit >= 0 && now_ms - since_ >= static_cast<uint64_t>(limit))
    rpc::respond_error(ex_, {cn::Code::deadline_exceeded,
                             "the process is not reading its input (waited " + std::to_string(limit) + " ms)"});
}

StreamInputBody::StreamInputBody(EnvdProcesses& svc, http::Exchange& ex)
    : svc_(svc), ex_(ex), reader_(static_cast<size_t>(svc.ctx.config.max_body_bytes)) {}

void StreamInputBody::on_body(const char* data, size_t len) {
  if (failed_) return;
  bool ok = reader_.feed(std::string_view(data, len), [this](const cn::EnvelopeReader::Message& m) {
    if (m.flags & cn::kFlagEndStream) return true;
    return message(m.payload);
  });
  if (!ok && !failed_) fail({cn::Code::invalid_argument, "malformed request stream: " + reader_.error()});
}

void StreamInputBody::complete() {
  if (failed_) return;
  if (!reader_.finish()) return fail({cn::Code::invalid_argument, "malformed request stream: " + reader_.error()});
  if (exec_id_.empty()) return fail({cn::Code::invalid_argument, "the input stream had no start message"});
  rpc::begin_stream(ex_);
  std::string out = ex_.take_buffer();
  rpc::append_message(out, [](std::string& o) { o += "{}"; });
  cn::append_end_stream(out, nullptr);
  ex_.end(std::move(out));
}

void StreamInputBody::tick(uint64_t now_ms) {
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

bool StreamInputBody::message(std::string_view payload) {
  auto d = wire::decode_stream_input(payload);
  if (auto* err = std::get_if<protocol::DecodeError>(&d)) {
    fail({cn::Code::invalid_argument, err->message});
    return false;
  }
  auto& ev = std::get<wire::StreamInputEvent>(d);
  using Kind = wire::StreamInputEvent::Kind;
  if (ev.kind == Kind::start) {
    EnvdProcesses::Entry* p = svc_.find(ev.process);
    exec::Execution* e = p ? svc_.execution(*p) : nullptr;
    if (!e) {
      fail(process_not_found(ev.process));
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

void StreamInputBody::fail(const cn::Error& e) {
  if (failed_) return;
  failed_ = true;
  if (paused_) ex_.resume_body();
  paused_ = false;
  rpc::stream_error(ex_, e);
}

}  // namespace execd::envd
