// execd/event_stream: one execution's events on one HTTP response, in either
// framing: the response head, init and keepalive pings, output events, and
// the terminal event that ends the response. Used by /command and by bash
// session runs. The stream frees itself (in its ping timer's close
// callback) once it has ended or its connection has closed; its owner hears
// about the latter and about the socket draining (to resume a paused
// producer).
#pragma once

#include <uv.h>

#include <string>
#include <string_view>

#include "execd/context.h"
#include "execd/server.h"
#include "protocol/envelope.h"
#include "protocol/http.h"

namespace execd {

class EventStream : public StreamObserver {
 public:
  class Owner {
   public:
    virtual ~Owner() = default;
    virtual void on_stream_writable() = 0;
    // The client went away; the stream is gone after this call.
    virtual void on_stream_closed() = 0;
  };

  EventStream(Connection& conn, protocol::Framing framing, Owner* owner);

  // Writes the head, `init` with `id` and the first ping; pings every 3 s.
  void start(std::string_view id);
  void output(protocol::OutputStream s, const uint8_t* data, size_t len);
  bool over_budget() const { return conn_ && conn_->over_budget(); }
  // Flushes held-back output, writes the terminal event and ends the response.
  void finish(const protocol::ExecutionResult& result);
  // Background commands: the stream only says that the command started.
  void finish_background();
  // Frees a stream that was never started.
  void discard();

  void on_writable() override;
  void on_closed() override;

 private:
  void ping();
  void detach();

  Connection* conn_;
  Owner* owner_;
  protocol::EventEncoder enc_;
  uv_timer_t ping_;
  std::string buf_;
  bool detached_ = false;
};

// Fills `signal` ("SIGKILL") and `signal_text` ("killed") of a result.
void set_signal(protocol::ExecutionResult& r, int signal);

// Exact framing when the server is configured for it or the client asks
// with `Accept: application/x-ndjson`.
protocol::Framing framing_for(const Context& ctx, const protocol::HttpRequest& req);

}  // namespace execd
