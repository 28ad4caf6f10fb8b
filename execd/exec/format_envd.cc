// execd/exec/format_envd: E2B envd's process events as a stream format
// (see formats.h).
#include "execd/exec/formats.h"

#include <string>

#include "protocol/envd.h"

namespace execd::exec {

namespace cn = protocol::connect;
namespace envd = protocol::envd;

namespace {

constexpr uint64_t kDefaultKeepaliveMs = 90 * 1000;  // envd's, when the client names none

template <class Fn>
void message(std::string& out, Fn write) {
  size_t at = cn::begin_envelope(out, 0);
  write(out);
  cn::finish_envelope(out, at);
}

}  // namespace

ProcessEventFormat::ProcessEventFormat(uint32_t pid, bool pty, uint64_t keepalive_ms, bool start)
    : pid_(pid), pty_(pty), start_(start), keepalive_ms_(keepalive_ms ? keepalive_ms : kDefaultKeepaliveMs) {}

void ProcessEventFormat::begin(std::string& out, std::string_view, int64_t) {
  if (pid_) message(out, [&](std::string& o) { envd::append_start_event(o, pid_); });
}

void ProcessEventFormat::ping(std::string& out, int64_t) { message(out, envd::append_keepalive_event); }

void ProcessEventFormat::gap(std::string&, protocol::OutputStream s, uint64_t requested, uint64_t from, int64_t) {
  gaps_.emplace_back("execd-gap",
                     std::string(protocol::stream_name(s)) + " " + std::to_string(requested) + "-" + std::to_string(from));
}

void ProcessEventFormat::output(std::string& out, protocol::OutputStream s, const uint8_t* data, size_t len, int64_t) {
  envd::DataStream ds = pty_                               ? envd::DataStream::pty_bytes
                        : s == protocol::OutputStream::out ? envd::DataStream::stdout_bytes
                                                           : envd::DataStream::stderr_bytes;
  message(out, [&](std::string& o) { envd::append_data_event(o, ds, data, len); });
}

void ProcessEventFormat::terminal(std::string& out, const protocol::ExecutionResult& r, int64_t) {
  if (!r.start_error.empty()) {
    cn::Error e{cn::Code::invalid_argument, "error starting process: " + r.start_error};
    return cn::append_end_stream(out, &e, gaps_);
  }
  if (r.timed_out && start_) {
    // The call's own deadline ended the process: the call failed with it,
    // so the SDK raises its timeout whichever side noticed first.
    cn::Error e{cn::Code::deadline_exceeded,
                "the process ran past the call's deadline (Connect-Timeout-Ms) and was stopped"};
    return cn::append_end_stream(out, &e, gaps_);
  }
  envd::EndEvent end;
  if (r.exit_code) {
    end.exited = true;
    end.exit_code = *r.exit_code;
    end.status = "exit status " + std::to_string(*r.exit_code);
  } else {
    end.exit_code = -1;
    end.status = "signal: " + (r.signal_text.empty() ? r.signal : r.signal_text);
  }
  if (end.exit_code != 0) end.error = end.status;
  message(out, [&](std::string& o) { envd::append_end_event(o, end); });
  cn::append_end_stream(out, nullptr, gaps_);
}

void ProcessEventFormat::background_ack(std::string& out, int64_t) { cn::append_end_stream(out, nullptr, gaps_); }

void ProcessEventFormat::overflow(std::string& out, std::string_view message, const protocol::ExecutionResult&,
                                  int64_t) {
  cn::Error e{cn::Code::resource_exhausted, std::string(message)};
  cn::append_end_stream(out, &e, gaps_);
}

}  // namespace execd::exec
