// execd/ws_conn: see header.
#include "execd/ws_conn.h"

#include <spdlog/spdlog.h>

namespace execd {

using protocol::WsEvent;
using protocol::WsOpcode;

WsConnection::WsConnection(Connection& conn) : conn_(&conn), alive_(conn.weak()) {
  uv_timer_init(conn.loop(), &timer_);
  timer_.data = this;
  last_read_ms_ = last_ping_ms_ = uv_now(conn.loop());
}

WsConnection* WsConnection::accept(Connection& conn, const protocol::HttpRequest& req, size_t max_message) {
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
  if (!hs.accepted) {
    conn.write_raw(std::move(hs.response));
    conn.close_after_writes();
    return nullptr;
  }
  auto* ws = new WsConnection(conn);
  ws->parser_ = protocol::WsFrameParser(protocol::WsParserLimits{max_message});
  conn.write_raw(std::move(hs.response));
  conn.take_over([ws](const char* d, size_t n) { ws->on_data(d, n); }, ws);
  uv_timer_start(&ws->timer_, [](uv_timer_t* t) { static_cast<WsConnection*>(t->data)->on_tick(); }, 1000, 1000);
  return ws;
}

void WsConnection::on_data(const char* data, size_t len) {
  if (!conn_) return;
  last_read_ms_ = uv_now(conn_->loop());
  parser_.feed(reinterpret_cast<const uint8_t*>(data), len);
  WsEvent ev;
  while (conn_ && parser_.next_event(ev)) {
    switch (ev.kind) {
      case WsEvent::Kind::text:
        if (handler_ && !close_sent_) handler_->on_ws_text(ev.payload);
        break;
      case WsEvent::Kind::binary:
        if (handler_ && !close_sent_) handler_->on_ws_binary(ev.payload);
        break;
      case WsEvent::Kind::ping:
        if (!close_sent_) conn_->write_raw(protocol::encode_pong_frame(ev.payload));
        break;
      case WsEvent::Kind::pong:
        break;
      case WsEvent::Kind::close:
        close_received_ = true;
        if (!close_sent_) {
          close_sent_ = true;
          conn_->write_raw(protocol::encode_close_frame(ev.code == protocol::ws_close::no_status
                                                            ? protocol::ws_close::no_status
                                                            : ev.code));
        }
        conn_->close_after_writes();
        break;
      case WsEvent::Kind::error:
        spdlog::debug("{}: websocket protocol error: {}", conn_->peer(), ev.payload);
        if (!close_sent_) {
          close_sent_ = true;
          conn_->write_raw(protocol::encode_close_frame(ev.code, ev.payload));
        }
        conn_->close_after_writes();
        break;
    }
  }
}

void WsConnection::send_text(std::string_view text) {
  if (!conn_ || close_sent_) return;
  conn_->write_raw(protocol::encode_text_frame(text));
}

void WsConnection::send_binary(uint8_t prefix, const uint8_t* data, size_t len) {
  if (!conn_ || close_sent_) return;
  protocol::WsFrameHeader h = protocol::encode_binary_header_with_prefix(prefix, len);
  std::string frame;
  frame.reserve(h.size + len);
  frame.append(reinterpret_cast<const char*>(h.bytes), h.size);
  frame.append(reinterpret_cast<const char*>(data), len);
  conn_->write_raw(std::move(frame));
}

void WsConnection::send_raw_binary(std::string_view payload) {
  if (!conn_ || close_sent_) return;
  conn_->write_raw(protocol::encode_binary_frame(payload));
}

void WsConnection::close(uint16_t code, std::string_view reason) {
  if (!conn_ || close_sent_) return;
  close_sent_ = true;
  close_sent_ms_ = uv_now(conn_->loop());
  conn_->write_raw(protocol::encode_close_frame(code, reason));
  if (close_received_) conn_->close_after_writes();
}

void WsConnection::on_tick() {
  if (!conn_) return;
  uint64_t now = uv_now(conn_->loop());
  if (close_sent_) {
    if (now - close_sent_ms_ >= kCloseWaitMs) conn_->close();
    return;
  }
  if (now - last_read_ms_ >= kReadDeadlineMs) {
    spdlog::debug("{}: websocket read deadline passed", conn_->peer());
    conn_->close();
    return;
  }
  if (now - last_ping_ms_ >= kPingIntervalMs) {
    last_ping_ms_ = now;
    conn_->write_raw(protocol::encode_ping_frame());
  }
}

void WsConnection::on_writable() {
  // A peer that keeps draining our writes is alive even if it sends nothing
  // (a client under backpressure cannot answer pings promptly).
  if (conn_) last_read_ms_ = uv_now(conn_->loop());
  if (handler_ && conn_) handler_->on_ws_writable();
}

void WsConnection::on_closed() {
  conn_ = nullptr;
  WsHandler* h = handler_;
  handler_ = nullptr;
  if (h) h->on_ws_closed();
  uv_timer_stop(&timer_);
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), [](uv_handle_t* h) { delete static_cast<WsConnection*>(h->data); });
}

}  // namespace execd
