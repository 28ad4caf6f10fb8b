// execd/proxy/proxy: the streaming reverse proxy behind ANY
// /proxy/{port}/{rest...} (execd/api/proxy decodes the target), to
// services on 127.0.0.1 inside the sandbox (how the lifecycle server's
// bridge-mode endpoints reach them).
//
// One request is one ProxyExchange: the Source of the client's response
// and the sink of its streamed request body, owning one upstream connection
// (execd/http/upstream). Backpressure is the existing machinery both ways:
// the upstream write queue above its mark pauses the client's body, the
// client's queue above its mark stops reading the service. A 101 turns the
// pair into a Tunnel (the client connection's Upgraded protocol) that
// relays bytes both ways with half-close. The service's response is relayed
// with its own framing where it has a length, else chunked (or delimited by
// closing, for HTTP/1.0 clients); a service vanishing mid-response closes the
// client connection rather than ending the response as if it were complete.
// Large sized or close-delimited bodies move service socket → pipe → client
// socket with splice(2): no copy through execd, fewer wake-ups per byte
// (close-delimited ones to HTTP/1.1 clients one chunk per pipe load).
#pragma once

#include <cstdint>

#include "execd/context.h"
#include "execd/http/exchange.h"
#include "execd/http/upstream.h"
#include "protocol/proxy.h"

namespace execd::proxy {

class ProxyService {
 public:
  explicit ProxyService(const Context& ctx) : ctx_(ctx), pool_(ctx.loop) {}
  // execd's own port: never proxied to (no loops).
  void set_own_port(int port) { own_port_ = port; }
  int own_port() const { return own_port_; }
  const Context& ctx() const { return ctx_; }
  http::UpstreamPool& pool() { return pool_; }
  http::SplicePipes& pipes() { return pipes_; }
  uint64_t timeout_ms() const { return static_cast<uint64_t>(ctx_.config.proxy_timeout_ms); }
  // Proxied requests in progress and open tunnels (GET /activity).
  size_t open() const { return open_; }
  void opened() { ++open_; }
  void closed() { --open_; }
  uint64_t idle_timeout_ms() const { return static_cast<uint64_t>(ctx_.config.proxy_idle_timeout_ms); }
  size_t tunnels() const { return tunnels_; }
  void count_tunnel(int delta) { tunnels_ = static_cast<size_t>(static_cast<int64_t>(tunnels_) + delta); }
  // Relays `ex` to 127.0.0.1:`port` with the request `head` (the body,
  // framed as `body`, follows as it arrives): a ProxyExchange, attached.
  void forward(http::Exchange& ex, int port, std::string head, protocol::BodyFraming body);
  void close() {
    pool_.close();
    pipes_.close();
  }

 private:
  const Context& ctx_;
  size_t tunnels_ = 0;
  http::UpstreamPool pool_;
  http::SplicePipes pipes_;
  int own_port_ = 0;
  size_t open_ = 0;
};

}  // namespace execd::proxy
