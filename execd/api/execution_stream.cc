// execd/api/execution_stream: see header.
#include "execd/api/execution_stream.h"

#include <spdlog/spdlog.h>

#include "execd/api/spill_file.h"
#include "execd/http/connection.h"
#include "pty/command.h"

namespace execd::api {

ExecutionStream::ExecutionStream(http::Exchange& ex, protocol::Framing framing) : ex_(ex), enc_(framing) {}

ExecutionStream::~ExecutionStream() {
  if (spill_) spill_->detach();
  drop_producer();
}

void ExecutionStream::spill_to(uv_loop_t* loop, std::string dir, uint64_t limit) {
  spill_allowed_ = true;
  spill_loop_ = loop;
  spill_dir_ = std::move(dir);
  spill_limit_ = limit;
}

void ExecutionStream::deliver(std::string&& buf) {
  if (overflowed_) {
    end_tail_ += buf;
    return;
  }
  if (spilling_) {
    std::string error;
    if (!spill_) {
      spill_ = SpillFile::create(spill_loop_, spill_dir_, spill_limit_, error);
      if (!spill_) return overflow(error);
      handed_ = 0;
      spill_->set_on_written([this] {
        if (spill_ && spill_->failed() && !overflowed_) overflow(spill_->failure());
        hand_over();
      });
    }
    if (!spill_->append(buf.data(), buf.size(), error)) overflow(error);
    return;
  }
  if (ex_.send(std::move(buf))) return;
  if (spill_allowed_) {
    spilling_ = waiting_ = true;
  } else if (producer) {
    producer->set_client_paused(true);
  }
}

void ExecutionStream::overflow(const std::string& reason) {
  if (overflowed_ || ended_) return;
  overflowed_ = true;
  spdlog::warn("execution stream to {}: {}; ending it", ex_.peer(), reason);
  if (ExecutionProducer* p = producer.get()) p->output_overflow(reason);
  if (ended_) return;
  ended_ = true;
  drop_producer();
  end_response({});
}

void ExecutionStream::end_response(std::string&& buf) {
  if (!spilling_ && end_tail_.empty()) return ex_.end(std::move(buf));
  end_tail_ += buf;
  end_pending_ = true;
  hand_over();
}

void ExecutionStream::hand_over() {
  while (spilling_ && !waiting_) {
    if (spill_ && handed_ < spill_->durable()) {
      uint64_t n = spill_->durable() - handed_;
      uint64_t from = handed_;
      handed_ += n;
      if (!ex_.send_file(spill_->file(), from, n)) waiting_ = true;
      continue;
    }
    if (spill_ && !spill_->settled()) return;  // the rest is being written
    // Caught up: the connection has (or has sent) everything spilled. The
    // next time the client falls behind starts a new file.
    if (spill_) spill_->detach();
    spill_.reset();
    spilling_ = false;
  }
  if (spilling_) return;
  if (end_pending_) {
    end_pending_ = false;
    ex_.end(std::move(end_tail_));
  } else if (producer) {
    producer->set_client_paused(false);
  }
}

void ExecutionStream::drop_producer() {
  if (ExecutionProducer* p = producer.get()) {
    producer.cut();
    p->client_gone();
  }
}

void ExecutionStream::start(ExecutionProducer& p, std::string_view id, std::vector<std::string> extra_headers) {
  link(*this, producer, p, p.stream);
  // The head goes out with init and the first ping, in one write.
  std::vector<std::string> headers = {std::string("Content-Type: ") + enc_.content_type(), "Cache-Control: no-cache",
                                      "X-Accel-Buffering: no"};
  for (auto& h : extra_headers) headers.push_back(std::move(h));
  ex_.begin_chunked(200, std::move(headers), /*flush_now=*/false);
  std::string buf = ex_.take_buffer();
  int64_t now = unix_ms();
  enc_.init(buf, id, now);
  enc_.ping(buf, now);
  last_ping_ms_ = ex_.connection().host().now_ms();
  ex_.send(std::move(buf));
}

void ExecutionStream::output(protocol::OutputStream s, const uint8_t* data, size_t len) {
  if (ended_) return;
  std::string buf = ex_.take_buffer();
  enc_.output(buf, s, data, len, unix_ms());
  deliver(std::move(buf));
}

bool ExecutionStream::begin_ending(std::string& buf, int64_t now) {
  if (ended_) return false;
  ended_ = true;
  producer.cut();
  buf = ex_.take_buffer();
  enc_.flush(buf, protocol::OutputStream::out, now);
  enc_.flush(buf, protocol::OutputStream::err, now);
  return true;
}

void ExecutionStream::finish(const protocol::ExecutionResult& result) {
  std::string buf;
  int64_t now = unix_ms();
  if (!begin_ending(buf, now)) return;
  enc_.terminal(buf, result, now);
  end_response(std::move(buf));
}

void ExecutionStream::event(std::string_view json_object) {
  if (ended_) return;
  std::string buf = ex_.take_buffer();
  enc_.event(buf, json_object);
  deliver(std::move(buf));
}

void ExecutionStream::finish_with(std::string_view json_object) {
  std::string buf;
  if (!begin_ending(buf, unix_ms())) return;
  enc_.event(buf, json_object);
  end_response(std::move(buf));
}

void ExecutionStream::finish_background() {
  if (ended_) return;
  ended_ = true;
  producer.cut();
  std::string buf = "{\"type\":\"execution_complete\",\"timestamp\":" + std::to_string(unix_ms()) + "}";
  buf += enc_.framing() == protocol::Framing::exact ? "\n" : "\n\n";
  ex_.end(std::move(buf));
}

void ExecutionStream::proceed() {
  waiting_ = false;
  if (spilling_) return hand_over();
  if (producer) producer->set_client_paused(false);
}

void ExecutionStream::stop() {
  ended_ = true;
  if (spill_) spill_->detach();
  spill_.reset();
  spilling_ = end_pending_ = false;
  drop_producer();
}

void ExecutionStream::tick(uint64_t now_ms) {
  // A client behind on output needs no keepalive.
  if (ended_ || spilling_ || now_ms - last_ping_ms_ < kPingIntervalMs) return;
  last_ping_ms_ = now_ms;
  std::string buf;
  enc_.ping(buf, unix_ms());
  ex_.send(std::move(buf));
}

void set_signal(protocol::ExecutionResult& r, int signal) {
  if (!signal) return;
  r.signal = pty::signal_name(signal);
  r.signal_text = pty::signal_description(signal);
}

protocol::Framing framing_for(const Context& ctx, const http::Exchange& ex) {
  const std::string* accept = ex.header("accept");
  bool exact = ctx.config.exact_framing || (accept && accept->find("application/x-ndjson") != std::string::npos);
  return exact ? protocol::Framing::exact : protocol::Framing::compat;
}

}  // namespace execd::api
