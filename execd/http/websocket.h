// execd/http/websocket: a WebSocket session on an upgraded Connection, owned
// by that connection. Owns the frame parser, the close handshake (echoing a
// client close, or sending ours and waiting kCloseWaitMs for the echo), the
// 30 s keepalive ping and the 60 s read deadline (both on the server tick),
// and one WsHandler, which it destroys when the connection goes.
// Protocol errors close with 1002/1007/1009 as the parser reports them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "execd/http/connection.h"
#include "execd/http/exchange.h"
#include "protocol/websocket.h"

namespace execd::http {

class WsHandler {
 public:
  virtual ~WsHandler() = default;
  virtual void on_text(std::string& text) = 0;
  virtual void on_binary(std::string& data) = 0;
  // A send returned false earlier and the peer has caught up.
  virtual void proceed() {}
};

class WebSocket final : public Upgraded {
 public:
  static constexpr uint64_t kPingIntervalMs = 30000;
  static constexpr uint64_t kReadDeadlineMs = 60000;
  static constexpr uint64_t kCloseWaitMs = 2000;

  // Answers the handshake on `ex`. Refused: the error response is sent and
  // nullptr returned. Accepted: the 101 is queued, the connection belongs to
  // the returned session (give it a handler at once).
  static WebSocket* accept(Exchange& ex, size_t max_message);

  void set_handler(std::unique_ptr<WsHandler> handler) { handler_ = std::move(handler); }
  // Each returns false once the peer is behind (wait for WsHandler::proceed)
  // or gone.
  bool send_text(std::string_view text);
  bool send_binary(uint8_t prefix, const uint8_t* data, size_t len);
  bool send_raw_binary(std::string_view payload);
  // Starts the close handshake; the handler hears nothing more.
  void close(uint16_t code, std::string_view reason);
  bool closing() const { return close_sent_ || conn_.closing(); }
  void pause_reading() { conn_.pause_reading(); }
  void resume_reading() { conn_.resume_reading(); }

  // Upgraded
  void on_data(const char* data, size_t len) override;
  void proceed() override;
  void stop() override;
  void tick(uint64_t now_ms) override;

 private:
  WebSocket(Connection& conn, size_t max_message);
  bool write(std::string&& frame);

  Connection& conn_;
  protocol::WsFrameParser parser_;
  std::unique_ptr<WsHandler> handler_;
  uint64_t last_read_ms_ = 0, close_sent_ms_ = 0, last_ping_ms_ = 0;
  bool close_sent_ = false, close_received_ = false, waiting_ = false, stopped_ = false;
};

}  // namespace execd::http
