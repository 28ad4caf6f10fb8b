// execd/event_stream: see header.
#include "execd/event_stream.h"

#include "pty/command.h"

namespace execd {

EventStream::EventStream(Connection& conn, protocol::Framing framing, Owner* owner)
    : conn_(&conn), owner_(owner), enc_(framing) {
  uv_timer_init(conn.loop(), &ping_);
  ping_.data = this;
}

void EventStream::start(std::string_view id) {
  conn_->begin_stream(200,
                      {std::string("Content-Type: ") + enc_.content_type(), "Cache-Control: no-cache",
                       "X-Accel-Buffering: no"},
                      this);
  std::string buf;
  int64_t now = unix_ms();
  enc_.init(buf, id, now);
  enc_.ping(buf, now);
  conn_->stream_write(buf);
  uv_timer_start(&ping_, [](uv_timer_t* t) { static_cast<EventStream*>(t->data)->ping(); }, 3000, 3000);
}

void EventStream::output(protocol::OutputStream s, const uint8_t* data, size_t len) {
  if (!conn_) return;
  buf_.clear();
  enc_.output(buf_, s, data, len, unix_ms());
  conn_->stream_write(buf_);
}

void EventStream::finish(const protocol::ExecutionResult& result) {
  if (conn_) {
    std::string buf;
    int64_t now = unix_ms();
    enc_.flush(buf, protocol::OutputStream::out, now);
    enc_.flush(buf, protocol::OutputStream::err, now);
    enc_.terminal(buf, result, now);
    conn_->stream_write(buf);
    conn_->end_stream();
  }
  detach();
}

void EventStream::finish_background() {
  if (conn_) {
    std::string buf = "{\"type\":\"execution_complete\",\"timestamp\":" + std::to_string(unix_ms()) + "}";
    buf += enc_.framing() == protocol::Framing::exact ? "\n" : "\n\n";
    conn_->stream_write(buf);
    conn_->end_stream();
  }
  detach();
}

void EventStream::discard() {
  conn_ = nullptr;
  detach();
}

void EventStream::on_writable() {
  if (owner_) owner_->on_stream_writable();
}

void EventStream::on_closed() {
  conn_ = nullptr;
  Owner* owner = owner_;
  detach();
  if (owner) owner->on_stream_closed();
}

void EventStream::ping() {
  if (!conn_) return;
  std::string buf;
  enc_.ping(buf, unix_ms());
  conn_->stream_write(buf);
}

void EventStream::detach() {
  if (detached_) return;
  detached_ = true;
  owner_ = nullptr;
  if (conn_) conn_->set_observer(nullptr);
  conn_ = nullptr;
  uv_timer_stop(&ping_);
  uv_close(reinterpret_cast<uv_handle_t*>(&ping_), [](uv_handle_t* h) { delete static_cast<EventStream*>(h->data); });
}

void set_signal(protocol::ExecutionResult& r, int signal) {
  if (!signal) return;
  r.signal = pty::signal_name(signal);
  r.signal_text = pty::signal_description(signal);
}

protocol::Framing framing_for(const Context& ctx, const protocol::HttpRequest& req) {
  const std::string* accept = req.header("accept");
  bool exact = ctx.config.exact_framing || (accept && accept->find("application/x-ndjson") != std::string::npos);
  return exact ? protocol::Framing::exact : protocol::Framing::compat;
}

}  // namespace execd
