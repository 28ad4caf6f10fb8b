// execd/server: the TCP listener and HTTP connections on the event loop.
//
// A Connection owns its socket, its request parser and its write queue. It
// serves one request at a time (pipelined requests wait in `pending_input_`)
// and gives the current response's owner two signals: writable (the write
// queue fell below the low-water mark) and closed. Handlers never see libuv.
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/http.h"

namespace execd {

class Connection;

// Whoever owns the response being streamed on a connection.
class StreamObserver {
 public:
  virtual ~StreamObserver() = default;
  virtual void on_writable() = 0;
  virtual void on_closed() = 0;
};

class Server {
 public:
  using Handler = std::function<void(Connection&, protocol::HttpRequest&)>;
  using HeadHandler = std::function<protocol::BodyMode(Connection&, protocol::HttpRequest&)>;

  // `idle_timeout_ms`: a connection that sends nothing for this long while
  // no response is in progress is closed (idle keep-alive, or a stalled
  // request head or body).
  Server(uv_loop_t* loop, protocol::RequestParser::Limits limits, uint64_t idle_timeout_ms);
  // Returns 0 or a libuv error.
  int listen(const std::string& host, int port);
  void set_handler(Handler h) { handler_ = std::move(h); }
  void set_head_handler(HeadHandler h) { head_handler_ = std::move(h); }
  // Stops accepting; open connections finish their current response and close.
  void stop_accepting();
  void close_idle_connections();
  void close_all_connections();
  size_t connection_count() const { return connections_; }
  int bound_port() const;
  uv_loop_t* loop() const { return loop_; }

 private:
  friend class Connection;
  static void on_connection(uv_stream_t* server, int status);

  uv_loop_t* loop_;
  uv_tcp_t listener_;
  bool listening_ = false, draining_ = false;
  protocol::RequestParser::Limits limits_;
  uint64_t idle_timeout_ms_;
  Handler handler_;
  HeadHandler head_handler_;
  size_t connections_ = 0;
  Connection* first_ = nullptr;  // intrusive list of live connections
};

class Connection : public protocol::RequestVisitor {
 public:
  // Streams pause their producer above this many queued bytes and resume
  // below half of it.
  static constexpr size_t kStreamBudget = 1 << 20;

  // --- plain responses (end the current request) ---
  void respond(int status, std::string_view content_type, std::string_view body,
               const std::vector<std::string>& extra_headers = {});
  void respond_json(int status, std::string_view json) { respond(status, "application/json; charset=utf-8", json); }
  void respond_error(int status, std::string_view code, std::string_view message);
  void respond_empty(int status = 200) { respond(status, "", ""); }

  // --- streamed responses (chunked) ---
  void begin_stream(int status, const std::vector<std::string>& headers, StreamObserver* observer);
  void stream_write(std::string_view data);
  void end_stream();
  // Raw bytes after a head the caller wrote itself (Content-Length bodies, upgrades).
  void write_raw(std::string data);
  // The caller finished a raw response it wrote itself.
  void finish_raw_response();

  // After a 101 response: every further byte read (including any already
  // buffered) goes to `on_data`; the owner writes with write_raw() and ends
  // with close(). The observer still hears writable/closed.
  using RawReader = std::function<void(const char* data, size_t len)>;
  void take_over(RawReader on_data, StreamObserver* observer);

  // Set from a head handler: the request body is delivered here as it
  // arrives instead of being buffered (uploads). Pause reading to apply
  // backpressure.
  using BodySink = std::function<void(const char* data, size_t len)>;
  void set_body_sink(BodySink sink) { body_sink_ = std::move(sink); }
  int socket_fd() const;

  void set_observer(StreamObserver* o) { observer_ = o; }
  size_t queued_bytes() const { return queued_bytes_; }
  bool over_budget() const { return queued_bytes_ > kStreamBudget; }
  bool closed() const { return closing_; }
  void pause_reading();
  void resume_reading();
  // Closes now; queued writes are dropped.
  void close();
  // Closes once everything queued has been written (upgraded connections).
  void close_after_writes() { shutdown_after_writes(); }
  std::weak_ptr<Connection> weak() { return self_; }
  uv_loop_t* loop() const { return server_.loop_; }
  const std::string& peer() const { return peer_; }

  // RequestVisitor
  protocol::BodyMode on_request_head(protocol::HttpRequest& req) override;
  void on_body(const char* data, size_t len) override;
  void on_request(protocol::HttpRequest& req) override;

 private:
  friend class Server;
  explicit Connection(Server& server);
  ~Connection() override;
  void start();
  void process_input(const char* data = nullptr, size_t len = 0);
  void response_done();
  void queue_write(std::string data);
  void fail_request(int status, const std::string& message);
  void shutdown_after_writes();
  void arm_idle_timer();
  static void on_alloc(uv_handle_t*, size_t, uv_buf_t* buf);
  static void on_read(uv_stream_t*, ssize_t nread, const uv_buf_t* buf);

  Server& server_;
  std::shared_ptr<Connection> self_;  // released in the close callback
  uv_tcp_t tcp_;
  uv_timer_t idle_timer_;  // armed while the client owes us bytes
  int open_handles_ = 0;   // freed when both handles are closed
  protocol::RequestParser parser_;
  std::string pending_input_;
  bool in_request_ = false;     // a request is being answered
  bool keep_alive_ = true;
  bool streaming_ = false;
  bool closing_ = false, shutting_down_ = false, reading_ = false, read_paused_ = false;
  bool upgraded_ = false;
  bool parsing_ = false;
  RawReader raw_reader_;  // set once the connection left HTTP
  BodySink body_sink_;    // streamed request body, if the route asked for it  // inside parser_.feed(): responses must not re-enter it
  size_t queued_bytes_ = 0;
  StreamObserver* observer_ = nullptr;
  std::string peer_;
  Connection *prev_ = nullptr, *next_ = nullptr;
};

}  // namespace execd
