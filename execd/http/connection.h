// execd/http/connection: one HTTP/1.1 connection. Owns its transport, its
// request parser, its write queue and at most one live Exchange (or, after a
// 101, one Upgraded protocol). The only code that turns bytes on a socket
// into requests and responses into bytes on a socket.
//
// Lifetimes, in one rule: nothing is freed inside a call chain. close() and
// a finished response only mark state and ask the host for a safe point
// (run_deferred(), called by the server once per loop pass, outside every
// handler and source); there the connection stops its source, frees retired
// exchanges and, when closing, closes the transport. The host frees the
// Connection itself when the transport reports it closed.
//
// Pipelining: requests are answered in order, one at a time; input that
// arrives meanwhile waits (bounded) and is parsed once the response ended.
// `Expect: 100-continue`, upgrades and the idle deadline are handled here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "execd/http/exchange.h"
#include "execd/http/transport.h"
#include "execd/http/write_queue.h"
#include "protocol/http.h"

namespace execd::http {

class Connection;

// What a connection needs from whoever runs it.
class ConnectionHost {
 public:
  virtual ~ConnectionHost() = default;
  // A request head is complete: route and authorize it (set on_complete,
  // params, query, stream_body, invite_body, attach a source...).
  virtual void on_request_head(Exchange& ex) = 0;
  // Call conn.run_deferred() at the next safe point.
  virtual void schedule(Connection& conn) = 0;
  // The transport is closed: the host may free `conn` now.
  virtual void on_connection_closed(Connection& conn) = 0;
  virtual uint64_t now_ms() = 0;
  // Stopping: answer the current request, then close.
  virtual bool draining() = 0;
};

struct ConnectionLimits {
  protocol::RequestParser::Limits parser;
  uint64_t idle_timeout_ms = 0;    // keep-alive connection with nothing in progress; 0 = none
  uint64_t header_timeout_ms = 0;  // first byte of a request head to its end; 0 = none
  uint64_t body_timeout_ms = 0;    // longest silence inside a request body; 0 = none
  size_t max_connections = 0;      // 0 = no limit of our own
};

class Connection final : public TransportEvents, private protocol::RequestVisitor {
 public:
  static constexpr size_t kMaxPendingInput = 256 * 1024;
  static constexpr uint64_t kLingerMs = 2000;

  Connection(ConnectionHost& host, const ConnectionLimits& limits);
  ~Connection() override;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Takes the transport (which frees itself after close()) and starts reading.
  void start(Transport* transport, std::string peer);
  const std::string& peer() const { return peer_; }

  // Safe to call from anywhere: the teardown happens at the safe point.
  void close();
  // Sends what is queued, then closes (lingering to let the peer read it).
  void close_after_writes();
  bool closing() const { return close_requested_; }
  // The server's periodic tick: idle deadline, lingering close, source ticks.
  void tick(uint64_t now_ms);
  void run_deferred();
  // No request in progress (the server closes these first when stopping).
  bool idle() const { return !exchange_ && !upgraded_; }
  // Sent at least one request that passed the token check.
  bool trusted() const { return trusted_; }
  // Idle or still sending a request head: what the server sheds first when
  // it runs short of connections or descriptors.
  bool sheddable() const { return idle() && !close_requested_; }
  uint64_t idle_since_ms() const { return idle_since_ms_; }

  // --- for Exchange and Upgraded protocols ---
  WriteQueue& queue() { return queue_; }
  // Writes what it can now; false if the queue is still above its high-water mark.
  bool flush();
  // Moves up to `len` bytes from `pipe_fd` to the peer once the queue is
  // empty (queued bytes go first). Bytes moved; -EAGAIN: the peer is full or
  // the queue not yet empty (writable is being waited for); another -errno:
  // the connection is closing.
  ssize_t splice_from_pipe(int pipe_fd, size_t len);
  // Report writable (to the exchange's source, or the upgraded protocol)
  // even though the queue is empty.
  void wait_writable();
  bool keep_alive() const { return keep_alive_; }
  void pause_reading();
  void resume_reading();
  // Shuts the write side once the queue is empty; reading goes on (a tunnel
  // passing on its other end's half-close).
  void shutdown_write_when_flushed();
  ConnectionHost& host() { return host_; }

  // TransportEvents
  void on_transport_data(const char* data, size_t len) override;
  void on_transport_eof() override;
  void on_transport_error(int err) override;
  void on_transport_writable() override;
  void on_transport_closed() override;

 private:
  friend class Exchange;
  void process_input(const char* data, size_t len);
  void exchange_finished(Exchange& ex);
  void upgrade(Exchange& ex, std::unique_ptr<Upgraded> proto);
  void reject(int status, const std::string& message);
  void schedule();
  void update_reading();
  void writes_progressed();

  // RequestVisitor
  protocol::BodyMode on_request_head(protocol::HttpRequest& req) override;
  void on_body(const char* data, size_t len) override;
  void on_request(protocol::HttpRequest& req) override;

  ConnectionHost& host_;
  ConnectionLimits limits_;
  Transport* transport_ = nullptr;
  protocol::RequestParser parser_;
  WriteQueue queue_;
  std::unique_ptr<Exchange> exchange_;
  std::unique_ptr<Upgraded> upgraded_;
  std::vector<std::unique_ptr<Exchange>> retired_;
  std::string pending_input_;
  std::string peer_;
  uint64_t idle_since_ms_ = 0, linger_since_ms_ = 0;
  uint64_t head_started_ms_ = 0;     // a request head is arriving (0: none)
  bool trusted_ = false;
  bool keep_alive_ = true;
  bool scheduled_ = false;           // run_deferred() is due
  bool close_requested_ = false;     // close() was called
  bool transport_closed_ = false;    // transport_->close() was called
  bool close_after_writes_ = false;  // shut down once the queue is empty
  bool lingering_ = false;           // write side shut, discarding input until EOF
  bool write_blocked_ = false;       // waiting for the transport to be writable
  bool read_paused_ = false;         // by the exchange (request body backpressure)
  bool reading_ = false;
  bool parser_done_ = false;         // no more HTTP on this connection (upgrade, error)
  bool peer_eof_ = false;            // the peer half-closed and the upgraded protocol goes on
  bool peer_reset_ = false;          // the transport reported an error (a reset) before its EOF
  bool shutdown_pending_ = false;    // shutdown_write_when_flushed()
};

}  // namespace execd::http
