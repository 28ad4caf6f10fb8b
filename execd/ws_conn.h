// execd/ws_conn: a WebSocket on an upgraded Connection. Owns the frame parser,
// the 30 s keepalive ping / 60 s read deadline timer, and the close handshake
// (echoing a client close, or sending ours and waiting briefly for the echo).
// Protocol errors close with 1002/1007/1009 as the parser reports them.
// Messages go to one WsHandler; the WsConnection frees itself (in its timer's
// close callback) after the TCP connection is gone, telling the handler first.
#pragma once

#include <uv.h>

#include <memory>
#include <string>
#include <string_view>

#include "execd/server.h"
#include "protocol/http.h"
#include "protocol/websocket.h"

namespace execd {

class WsHandler {
 public:
  virtual ~WsHandler() = default;
  virtual void on_ws_text(std::string& text) = 0;
  virtual void on_ws_binary(std::string& data) = 0;
  // The write queue fell below the low-water mark.
  virtual void on_ws_writable() = 0;
  // The connection is gone; the WsConnection must not be used afterwards.
  virtual void on_ws_closed() = 0;
};

class WsConnection : public StreamObserver {
 public:
  static constexpr uint64_t kPingIntervalMs = 30000;
  static constexpr uint64_t kReadDeadlineMs = 60000;
  static constexpr uint64_t kCloseWaitMs = 2000;

  // Performs the handshake. On refusal the HTTP error response has been
  // written and nullptr is returned; on success the 101 is queued and the
  // connection belongs to the returned object.
  static WsConnection* accept(Connection& conn, const protocol::HttpRequest& req, size_t max_message);

  void set_handler(WsHandler* h) { handler_ = h; }
  void send_text(std::string_view text);
  // One binary message: the `prefix` byte followed by `len` bytes.
  void send_binary(uint8_t prefix, const uint8_t* data, size_t len);
  void send_raw_binary(std::string_view payload);
  // Starts the close handshake; the handler hears nothing more (except
  // on_ws_closed when the socket is gone).
  void close(uint16_t code, std::string_view reason);
  bool over_budget() const { return conn_ && conn_->over_budget(); }
  bool closing() const { return close_sent_ || !conn_; }
  void pause_reading() {
    if (conn_) conn_->pause_reading();
  }
  void resume_reading() {
    if (conn_) conn_->resume_reading();
  }

  // StreamObserver
  void on_writable() override;
  void on_closed() override;

 private:
  explicit WsConnection(Connection& conn);
  void on_data(const char* data, size_t len);
  void on_tick();

  Connection* conn_;
  std::weak_ptr<Connection> alive_;
  protocol::WsFrameParser parser_;
  WsHandler* handler_ = nullptr;
  uv_timer_t timer_;
  uint64_t last_read_ms_ = 0, close_sent_ms_ = 0, last_ping_ms_ = 0;
  bool close_sent_ = false, close_received_ = false;
};

}  // namespace execd
