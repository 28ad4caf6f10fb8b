// execd/exec/reader: see header.
#include "execd/exec/reader.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "execd/clock.h"
#include "execd/exec/formats.h"
#include "execd/exec/registry.h"
#include "execd/http/connection.h"

namespace execd::exec {

// A read of the log on a reader's behalf: the reader may go before the
// answer comes, which then finds an empty link.
struct LogRead {
  Link<ExecutionReader> reader;
};

ExecutionReader::ExecutionReader(http::Exchange& ex, Execution& exec, Role role, protocol::Framing framing,
                                 uint64_t from_stdout, uint64_t from_stderr, std::vector<std::string> extra_headers)
    // Kernel output comes in chunks the kernel chose; compat framing keeps them.
    : ExecutionReader(ex, exec, role, envelope_format(framing, kind_traits(exec.kind()).split_lines), from_stdout,
                      from_stderr, std::move(extra_headers)) {}

ExecutionReader::ExecutionReader(http::Exchange& ex, Execution& exec, Role role, std::unique_ptr<StreamFormat> format,
                                 uint64_t from_stdout, uint64_t from_stderr, std::vector<std::string> extra_headers)
    : ex_(ex), role_(role), enc_(std::move(format)), extra_headers_(std::move(extra_headers)) {
  want_[0] = from_stdout;
  want_[1] = from_stderr;
  exec.attach(*this, exec_);
  if (role_ != Role::original) {
    counted_ = &exec.registry();
    counted_->count_reader(+1);
  }
}

ExecutionReader::~ExecutionReader() {
  detach();
  if (counted_) counted_->count_reader(-1);
}

void ExecutionReader::detach() {
  mode_ = Mode::done;
  read_.cut();
  Execution* e = exec_.get();
  if (!e) return;
  exec_.cut();
  e->readers_changed();
}

void ExecutionReader::begin() {
  Execution* e = exec_.get();
  if (mode_ != Mode::pending || !e) return;
  std::vector<std::string> headers = {std::string("Content-Type: ") + enc_->content_type(), "Cache-Control: no-cache",
                                      "X-Accel-Buffering: no"};
  for (auto& h : extra_headers_) headers.push_back(std::move(h));
  ex_.begin_chunked(200, std::move(headers), /*flush_now=*/false);
  std::string buf = ex_.take_buffer();
  int64_t now = unix_ms();
  // The original stream names what it ran in (a session, a code context),
  // as the Go daemon did; a resume reader names the execution.
  const std::string& owner = e->spec().owner;
  enc_->begin(buf, role_ != Role::resume && !owner.empty() ? owner : e->id(), now);
  last_ping_ms_ = ex_.connection().host().now_ms();
  bool failed_start = e->done() && !e->result().start_error.empty();
  if (e->spec().background && (role_ == Role::attach || (role_ == Role::original && !failed_start))) {
    // A background start's stream says only that it started.
    enc_->background_ack(buf, now);
    return end(std::move(buf));
  }
  const OutputLog* log = e->log();
  for (int s = 0; s < 2; ++s) {
    uint64_t first = log ? log->index().start(s) : e->produced(s);
    uint64_t stored = log ? log->index().stored(s) : e->produced(s);
    auto plan = protocol::plan_resume(want_[s], first, stored, e->produced(s));
    if (plan.gap) enc_->gap(buf, static_cast<protocol::OutputStream>(s), want_[s], plan.from, now);
    want_[s] = plan.from;
    enc_->start_at(static_cast<protocol::OutputStream>(s), want_[s]);
  }
  if (log) {
    // Where to read from: the earlier of the two streams' positions; events
    // from there on (all of them for a reader from the start).
    const auto& idx = log->index();
    pos_ = want_[0] == 0 && want_[1] == 0 ? idx.first() : std::min(idx.locate(0, want_[0]), idx.locate(1, want_[1]));
  }
  mode_ = Mode::reading;
  if (!send(std::move(buf))) return;
  pump();
}

void ExecutionReader::reject(const protocol::ApiError& e) {
  if (mode_ != Mode::pending) return;
  detach();
  ex_.respond_error(e.status, e.code, e.message);
}

bool ExecutionReader::send(std::string&& buf) {
  if (buf.empty() || ex_.send(std::move(buf))) return true;
  Execution* e = exec_.get();
  if (mode_ == Mode::live && role_ == Role::original && e && e->pausable()) {
    mode_ = Mode::holding;  // live, and the run can wait: hold it
  } else if (mode_ != Mode::done) {
    mode_ = Mode::waiting;  // the rest is in the log: catch up from there
  }
  if (e) e->readers_changed();
  return false;
}

bool ExecutionReader::needs(uint64_t upto) const {
  return (mode_ == Mode::reading || mode_ == Mode::waiting) && pos_ < upto;
}

void ExecutionReader::pump() {
  Execution* e = exec_.get();
  if (!e || mode_ == Mode::done) return;
  mode_ = Mode::reading;
  const OutputLog* log = e->log();
  std::string buf = ex_.take_buffer();
  int64_t now = unix_ms();
  if (log && pos_ < log->first()) {
    // The log let go of bytes this reader had not read (it keeps the newest).
    const auto& idx = log->index();
    for (int s = 0; s < 2; ++s)
      if (want_[s] < idx.start(s)) {
        enc_->gap(buf, static_cast<protocol::OutputStream>(s), want_[s], idx.start(s), now);
        want_[s] = idx.start(s);
      }
    pos_ = log->first();
    skip_event_ = skip_event_ || !event_carry_.empty();
    event_carry_.clear();
  }
  uint64_t end = log ? log->end() : 0;
  if (pos_ < end) {
    if (!send(std::move(buf))) return;
    auto* request = new LogRead;
    link(*request, request->reader, *this, read_);
    e->log()->read(pos_, kReadChunk, [request](int err, std::string data) {
      std::unique_ptr<LogRead> done(request);
      if (ExecutionReader* r = done->reader.get()) {
        done->reader.cut();
        r->read_done(err, std::move(data));
      }
    });
    return;
  }
  // Everything stored has been given out. Output the log never kept (a
  // failing disk) while this reader was catching up is gone: say so.
  for (int s = 0; s < 2; ++s) {
    uint64_t total = e->produced(s);
    if (want_[s] < total) {
      enc_->gap(buf, static_cast<protocol::OutputStream>(s), want_[s], total, now);
      want_[s] = total;
    }
  }
  if (e->done()) return finish(std::move(buf));
  mode_ = Mode::live;
  e->readers_changed();
  send(std::move(buf));
}

void ExecutionReader::read_done(int err, std::string data) {
  Execution* e = exec_.get();
  if (!e || mode_ != Mode::reading) return;
  if (err) {
    spdlog::warn("execution {}: reading the retained output failed: {}", e->id(), uv_strerror(err));
    return end({});
  }
  const OutputLog* log = e->log();
  if (pos_ < log->first()) return pump();  // let go of meanwhile: a gap
  if (data.empty()) {
    // Nothing where the index says there is (a segment let go of and a
    // failed write at once): what is left of it is a gap.
    pos_ = std::max(pos_, log->end());
    return pump();
  }
  std::string buf = ex_.take_buffer();
  const auto* bytes = reinterpret_cast<const uint8_t*>(data.data());
  for (const auto& piece : log->index().pieces(pos_, pos_ + data.size())) {
    const uint8_t* at = bytes + (piece.at - pos_);
    if (piece.stream == kEvents) deliver_events(at, static_cast<size_t>(piece.len), buf);
    else deliver(piece.stream, piece.stream_at, at, piece.len, buf);
  }
  pos_ += data.size();
  e->readers_changed();
  if (!send(std::move(buf))) return;
  pump();
}

void ExecutionReader::deliver(int s, uint64_t at, const uint8_t* data, uint64_t n, std::string& buf) {
  if (at + n <= want_[s]) return;
  auto os = static_cast<protocol::OutputStream>(s);
  if (at > want_[s]) enc_->gap(buf, os, want_[s], at, unix_ms());
  uint64_t skip = want_[s] > at ? want_[s] - at : 0;
  enc_->output(buf, os, data + skip, static_cast<size_t>(n - skip), unix_ms());
  want_[s] = at + n;
}

void ExecutionReader::deliver_events(const uint8_t* data, size_t n, std::string& buf) {
  // Stored events are JSON lines; a read may end inside one.
  std::string_view in(reinterpret_cast<const char*>(data), n);
  while (!in.empty()) {
    size_t nl = in.find('\n');
    if (nl == std::string_view::npos) {
      if (!skip_event_) event_carry_.append(in);
      return;
    }
    if (skip_event_) {
      skip_event_ = false;
    } else if (event_carry_.empty()) {
      enc_->event(buf, in.substr(0, nl));
    } else {
      event_carry_.append(in.substr(0, nl));
      enc_->event(buf, event_carry_);
      event_carry_.clear();
    }
    in.remove_prefix(nl + 1);
  }
}

void ExecutionReader::on_output(Channel c, uint64_t stream_at, const uint8_t* data, size_t len, uint64_t stored) {
  if (mode_ != Mode::live && mode_ != Mode::holding) return;
  pos_ += stored;
  std::string buf = ex_.take_buffer();
  if (c == kEvents) {
    // One whole event (without its newline).
    enc_->event(buf, std::string_view(reinterpret_cast<const char*>(data), len ? len - 1 : 0));
  } else {
    deliver(c, stream_at, data, len, buf);
  }
  if (mode_ == Mode::holding) {
    ex_.send(std::move(buf));  // already waiting for proceed()
    return;
  }
  send(std::move(buf));
}

void ExecutionReader::on_finished() {
  if (mode_ == Mode::live || mode_ == Mode::holding) finish();
  else if (mode_ == Mode::pending) begin();
}

void ExecutionReader::finish(std::string buf) {
  Execution* e = exec_.get();
  if (!e) return;
  protocol::ExecutionResult r = e->result();
  int64_t now = unix_ms();
  enc_->flush(buf, protocol::OutputStream::out, now);
  enc_->flush(buf, protocol::OutputStream::err, now);
  enc_->terminal(buf, r, now);
  end(std::move(buf));
}

void ExecutionReader::overflow(const std::string& reason) {
  Execution* e = exec_.get();
  if (!e || mode_ == Mode::done || mode_ == Mode::pending) return;
  // Everything sent so far stands; the client hears why it ends here.
  spdlog::warn("execution {}: the stream to {} is too far behind ({}); ending it", e->id(), ex_.peer(), reason);
  std::string buf = ex_.take_buffer();
  int64_t now = unix_ms();
  enc_->flush(buf, protocol::OutputStream::out, now);
  enc_->flush(buf, protocol::OutputStream::err, now);
  std::string message = "execd: " + reason + "; the execution was interrupted";
  enc_->overflow(buf, message, e->result(), now);
  end(std::move(buf));
}

void ExecutionReader::end(std::string buf) {
  detach();
  ex_.end(std::move(buf));
}

void ExecutionReader::proceed() {
  if (mode_ == Mode::waiting) return pump();
  if (mode_ == Mode::holding) {
    mode_ = Mode::live;
    if (Execution* e = exec_.get()) e->readers_changed();
  }
}

void ExecutionReader::stop() { detach(); }

void ExecutionReader::tick(uint64_t now_ms) {
  // Only a reader with nothing else to send needs a keepalive.
  if (mode_ != Mode::live || now_ms - last_ping_ms_ < enc_->ping_interval_ms()) return;
  last_ping_ms_ = now_ms;
  std::string buf;
  enc_->ping(buf, unix_ms());
  ex_.send(std::move(buf));
}

}  // namespace execd::exec
