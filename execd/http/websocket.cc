// execd/http/websocket: see header.
#include "execd/http/websocket.h"

#include <spdlog/spdlog.h>

namespace execd::http {

using protocol::WsEvent;

WebSocket::WebSocket(Connection& conn, size_t max_message)
    : conn_(conn), parser_(protocol::WsParserLimits{max_message}) {
  last_read_ms_ = last_ping_ms_ = conn.host().now_ms();
}

WebSocket* WebSocket::accept(Exchange& ex, size_t max_message) {
  const auto& req = ex.request();
  std::string joined;
  auto lookup = [&req, &joined](std::string_view name) -> std::optional<std::string_view> {
    std::string lower(name);
    for (auto& c : lower) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
    bool found = false;
    joined.clear();
    for (const auto& [k, v] : req.headers) {
      if (k != lower) continue;
      if (found) joined += ", ";
      joined += v;
      found = true;
    }
    if (!found) return std::nullopt;
    return std::string_view(joined);
  };
  protocol::HandshakeResult hs = protocol::check_websocket_upgrade(req.method, lookup);
  ex.send_raw(hs.response);
  if (!hs.accepted) {
    ex.end_raw();
    ex.connection().close_after_writes();
    return nullptr;
  }
  auto* ws = new WebSocket(ex.connection(), max_message);
  ex.upgrade(std::unique_ptr<Upgraded>(ws));
  return ws;
}

bool WebSocket::write(std::string&& frame) {
  if (conn_.closing()) return false;
  conn_.queue().append(std::move(frame));
  bool more = conn_.flush();
  if (!more) waiting_ = true;
  return more;
}

bool WebSocket::send_text(std::string_view text) {
  if (close_sent_) return false;
  return write(protocol::encode_text_frame(text));
}

bool WebSocket::send_binary(uint8_t prefix, const uint8_t* data, size_t len) {
  if (close_sent_) return false;
  protocol::WsFrameHeader h = protocol::encode_binary_header_with_prefix(prefix, len);
  std::string frame = conn_.queue().take_buffer();
  frame.reserve(h.size + len);
  frame.append(reinterpret_cast<const char*>(h.bytes), h.size);
  frame.append(reinterpret_cast<const char*>(data), len);
  return write(std::move(frame));
}

bool WebSocket::send_raw_binary(std::string_view payload) {
  if (close_sent_) return false;
  return write(protocol::encode_binary_frame(payload));
}

void WebSocket::close(uint16_t code, std::string_view reason) {
  if (close_sent_ || conn_.closing()) return;
  close_sent_ = true;
  close_sent_ms_ = conn_.host().now_ms();
  write(protocol::encode_close_frame(code, reason));
  if (close_received_) conn_.close_after_writes();
}

void WebSocket::on_data(const char* data, size_t len) {
  if (stopped_) return;
  last_read_ms_ = conn_.host().now_ms();
  parser_.feed(reinterpret_cast<const uint8_t*>(data), len);
  WsEvent ev;
  while (!stopped_ && !conn_.closing() && parser_.next_event(ev)) {
    switch (ev.kind) {
      case WsEvent::Kind::text:
        if (handler_ && !close_sent_) handler_->on_text(ev.payload);
        break;
      case WsEvent::Kind::binary:
        if (handler_ && !close_sent_) handler_->on_binary(ev.payload);
        break;
      case WsEvent::Kind::ping:
        if (!close_sent_) write(protocol::encode_pong_frame(ev.payload));
        break;
      case WsEvent::Kind::pong:
        break;
      case WsEvent::Kind::close:
        close_received_ = true;
        if (!close_sent_) {
          close_sent_ = true;
          write(protocol::encode_close_frame(ev.code));
        }
        conn_.close_after_writes();
        return;
      case WsEvent::Kind::error:
        spdlog::debug("{}: websocket protocol error: {}", conn_.peer(), ev.payload);
        if (!close_sent_) {
          close_sent_ = true;
          write(protocol::encode_close_frame(ev.code, ev.payload));
        }
        conn_.close_after_writes();
        return;
    }
  }
}

void WebSocket::proceed() {
  // A peer that keeps draining our writes is alive even if it sends nothing
  // (a client under backpressure cannot answer pings promptly).
  last_read_ms_ = conn_.host().now_ms();
  if (!waiting_) return;
  waiting_ = false;
  if (handler_ && !close_sent_) handler_->proceed();
}

void WebSocket::stop() {
  if (stopped_) return;
  stopped_ = true;
  handler_.reset();  // its destructor cuts its links
}

void WebSocket::tick(uint64_t now) {
  if (stopped_ || conn_.closing()) return;
  if (close_sent_) {
    if (now - close_sent_ms_ >= kCloseWaitMs) conn_.close();
    return;
  }
  if (now - last_read_ms_ >= kReadDeadlineMs) {
    spdlog::debug("{}: websocket read deadline passed", conn_.peer());
    conn_.close();
    return;
  }
  if (now - last_ping_ms_ >= kPingIntervalMs) {
    last_ping_ms_ = now;
    write(protocol::encode_ping_frame());
  }
}

}  // namespace execd::http
