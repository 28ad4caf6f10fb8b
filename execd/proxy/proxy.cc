// execd/proxy/proxy: see header.
#include "execd/proxy/proxy.h"

#include <spdlog/spdlog.h>

#include <errno.h>
#include <string.h>

#include <cstdio>

#include "execd/http/connection.h"
#include "execd/limits.h"
#include "protocol/errors.h"
#include "protocol/proxy.h"

namespace execd::proxy {

namespace {

namespace codes = protocol::codes;
using http::Exchange;
using http::UpstreamConnection;
using protocol::BodyFraming;

// A 101 turned the client connection and the upstream one into a byte pipe.
// Owned by the client Connection (its Upgraded protocol); owns the upstream.
// Each direction stops reading its source while the other side's queue is
// above its mark, and passes a half-close on once its queue is flushed; the
// connection closes when both directions have ended.
class Tunnel final : public http::Upgraded, public http::UpstreamEvents {
 public:
  Tunnel(ProxyService& svc, http::Connection& conn, UpstreamConnection* up)
      : svc_(svc), conn_(conn), up_(up), idle_timeout_ms_(svc.idle_timeout_ms()), last_moved_ms_(conn.host().now_ms()) {
    up_->set_owner(*this);
    up_->want_data(true);
    svc_.count_tunnel(+1);
    svc_.opened();
  }
  ~Tunnel() override {
    release();
    svc_.count_tunnel(-1);
    svc_.closed();
  }

  // Client → service.
  void on_data(const char* data, size_t len) override {
    last_moved_ms_ = conn_.host().now_ms();
    if (!up_ || up_->broken()) return;
    if (!up_->write(std::string_view(data, len))) conn_.pause_reading();
  }
  void on_upstream_drained(UpstreamConnection&) override { conn_.resume_reading(); }
  bool on_eof() override {
    client_eof_ = true;
    if (up_) up_->shutdown_write_when_flushed();
    if (upstream_eof_) conn_.close_after_writes();
    return true;
  }

  // Service → client.
  void on_upstream_data(UpstreamConnection& up, const char* data, size_t len) override {
    last_moved_ms_ = conn_.host().now_ms();
    if (conn_.closing()) return;
    conn_.queue().append(std::string_view(data, len));
    if (!conn_.flush()) up.want_data(false);
  }
  void proceed() override {
    if (up_) up_->want_data(true);
  }
  void on_upstream_eof(UpstreamConnection& up) override {
    upstream_eof_ = true;
    if (up.broken() || client_eof_) {
      conn_.close_after_writes();
      return;
    }
    conn_.shutdown_write_when_flushed();
  }

  void stop() override { release(); }

  // Silent both ways for --proxy-idle-timeout: both ends go.
  void tick(uint64_t now_ms) override {
    if (now_ms - last_moved_ms_ < idle_timeout_ms_) return;
    spdlog::debug("proxy tunnel idle for {} ms: closing it", now_ms - last_moved_ms_);
    release();
    conn_.close();
  }

 private:
  void release() {
    if (up_) up_->close();
    up_ = nullptr;
  }

  ProxyService& svc_;
  http::Connection& conn_;
  UpstreamConnection* up_;
  const uint64_t idle_timeout_ms_;
  uint64_t last_moved_ms_;
  bool client_eof_ = false, upstream_eof_ = false;
};

// A body with at least this much left after the bytes that came with the
// head is spliced; smaller ones are not worth a pipe.
constexpr uint64_t kSpliceMinBytes = 64 * 1024;
// Bytes moved per wake-up before yielding to other connections.
constexpr size_t kSpliceBytesPerWake = 16u << 20;

bool idempotent(std::string_view method) {
  return method == "GET" || method == "HEAD" || method == "OPTIONS" || method == "TRACE" || method == "PUT" ||
         method == "DELETE";
}

// One proxied request: the client's response Source and the sink of its
// streamed body, owning the upstream connection until the response ended
// (then it goes back to the pool, or is closed) or a 101 hands it to a Tunnel.
class ProxyExchange final : public http::Source, public http::UpstreamEvents, private protocol::ResponseVisitor {
 public:
  ProxyExchange(ProxyService& svc, Exchange& ex, int port, std::string head, BodyFraming body)
      : svc_(svc), ex_(ex), port_(port), head_(std::move(head)), body_(body), parser_(*this) {
    parser_.set_head_request(ex.request().method == "HEAD");
    svc_.opened();
  }
  ~ProxyExchange() override {
    release_upstream(false);
    release_pipe();
    svc_.closed();
  }

  // At head time: no response may be written yet (the parser is mid-request).
  void start() {
    started_ms_ = now();
    up_ = svc_.pool().take(port_);
    if (up_) {
      up_->set_owner(*this);
      up_->want_data(true);
    } else if (!connect()) {
      refused_at_start_ = true;
      return;
    }
    up_->write(std::string_view(head_));
  }

  void request_complete() {
    request_complete_ = true;
    if (refused_at_start_) {
      fail(502, codes::kBadGateway, refused_message());
      return;
    }
    if (!up_) return;
    if (body_ == BodyFraming::chunked) up_->write(std::string_view(protocol::kLastChunk));
    deadline_ms_ = now() + svc_.timeout_ms();
  }

  // --- Source ---
  void on_body(const char* data, size_t len) override {
    if (!up_ || len == 0) return;
    body_started_ = true;
    std::string out;
    if (body_ == BodyFraming::chunked) {
      char size_line[24];
      int n = snprintf(size_line, sizeof size_line, "%zx\r\n", len);
      out.reserve(static_cast<size_t>(n) + len + 2);
      out.append(size_line, static_cast<size_t>(n));
      out.append(data, len);
      out.append("\r\n");
    } else {
      out.assign(data, len);
    }
    if (!up_->write(std::move(out)) && !client_paused_) {
      client_paused_ = true;
      paused_since_ms_ = now();
      ex_.pause_body();
    }
  }

  void proceed() override {
    last_moved_ms_ = now();
    if (splicing_) {
      pump();
      return;
    }
    if (upstream_paused_ && up_) {
      upstream_paused_ = false;
      up_->want_data(true);
    }
  }

  void stop() override {
    release_upstream(false);
    release_pipe();
  }

  // Every phase is bounded by --proxy-timeout: the connect, the request body
  // (a service that stops reading it), the response head, and the response
  // body (no byte moving either way, whoever stalls).
  void tick(uint64_t now_ms) override {
    if (!up_ || ex_.finished()) return;
    const uint64_t timeout = svc_.timeout_ms();
    const std::string service = "127.0.0.1:" + std::to_string(port_);
    if (parser_.head_done()) {
      if (now_ms - last_moved_ms_ >= timeout) {
        spdlog::debug("proxy to port {}: the response body stalled for {} ms", port_, now_ms - last_moved_ms_);
        fail(504, codes::kGatewayTimeout, "the response from " + service + " stalled");
      }
      return;
    }
    if (client_paused_ && now_ms - paused_since_ms_ >= timeout)
      return fail(504, codes::kGatewayTimeout,
                  service + " stopped reading the request body for " + std::to_string(timeout) + " ms");
    const bool connect_overdue = !up_->connected() && now_ms - started_ms_ >= timeout;
    const bool head_overdue = request_complete_ && now_ms >= deadline_ms_;
    if (connect_overdue || head_overdue)
      fail(504, codes::kGatewayTimeout, "no response from " + service + " within " + std::to_string(timeout) + " ms");
  }

  // --- UpstreamEvents ---
  void on_upstream_data(UpstreamConnection& up, const char* data, size_t len) override {
    if (splicing_) return;  // (reads are the splice's own from then on)
    size_t consumed = 0;
    auto result = parser_.feed(data, len, consumed);
    using R = protocol::ResponseParser::Result;
    if (result == R::need_more) {
      maybe_splice();
      return;
    }
    if (result == R::complete) {
      release_upstream(reusable_ && consumed == len);
      return;
    }
    if (result == R::upgrade && !bogus_upgrade_) {
      auto tunnel = std::make_unique<Tunnel>(svc_, ex_.connection(), up_);
      up_ = nullptr;
      Tunnel* t = tunnel.get();
      ex_.upgrade(std::move(tunnel));
      // What the service sent right after its 101 (frees are deferred: `t`
      // lives at least until the connection's next safe point).
      if (consumed < len) t->on_upstream_data(up, data + consumed, len - consumed);
      return;
    }
    spdlog::debug("proxy to port {}: bad response: {}", port_,
                  bogus_upgrade_ ? "101 to a request that asked for no upgrade" : parser_.error());
    fail(502, codes::kBadGateway, "malformed response from 127.0.0.1:" + std::to_string(port_));
  }

  void on_upstream_eof(UpstreamConnection& up) override {
    if (!parser_.head_done()) {
      if (up.reused && !parser_.started() && !retried_ && body_ == BodyFraming::none &&
          idempotent(ex_.request().method)) {
        // A kept-alive connection the service had closed meanwhile: once more
        // on a fresh one (nothing of the request was consumed by a body).
        retried_ = true;
        release_upstream(false);
        if (!connect()) {
          fail(502, codes::kBadGateway, refused_message());
          return;
        }
        up_->write(std::string_view(head_));
        return;
      }
      fail(502, codes::kBadGateway,
           up.connected() ? "127.0.0.1:" + std::to_string(port_) + " closed the connection before responding"
                          : refused_message());
      return;
    }
    // Mid-body: only a body delimited by an orderly close ends well (a reset
    // cut it short, whatever the framing).
    if (!up.reset() && parser_.finish() == protocol::ResponseParser::Result::complete) {
      release_upstream(false);
      return;
    }
    spdlog::debug("proxy to port {}: service closed mid-response", port_);
    fail(502, codes::kBadGateway, "response truncated");
  }

  void on_upstream_readable(UpstreamConnection&) override { pump(); }

  void on_upstream_drained(UpstreamConnection&) override {
    last_moved_ms_ = now();
    if (client_paused_) {
      client_paused_ = false;
      ex_.resume_body();
    }
  }

 private:
  // --- ResponseVisitor ---
  void on_response_head(protocol::HttpResponseHead& head) override {
    last_moved_ms_ = now();
    if (head.upgrade) {
      if (!ex_.request().upgrade) {
        bogus_upgrade_ = true;
        return;
      }
      ex_.send_raw(protocol::response_head(101, head.reason, protocol::client_response_headers(head)));
      return;
    }
    using Framing = Exchange::Framing;
    Framing framing = Framing::sized;
    if (head.has_body && !head.content_length)
      framing = ex_.request().version_minor >= 1 ? Framing::chunked : Framing::until_close;
    client_framing_ = framing;
    ex_.begin_relayed(head.status, head.reason, protocol::client_response_headers(head), framing);
  }

  void on_response_body(const char* data, size_t len) override {
    last_moved_ms_ = now();
    if (!ex_.send(std::string_view(data, len)) && up_ && !upstream_paused_) {
      upstream_paused_ = true;
      up_->want_data(false);
    }
  }

  void on_response_complete(bool keep_alive) override {
    reusable_ = keep_alive && request_complete_ && !ex_.request().upgrade && up_ && up_->idle_writes() &&
                !up_->broken();
    ex_.end();
  }

  // --- the spliced body ---
  // The rest of the body is large and sized or delimited by the close: from
  // now on it moves service → pipe → client in the kernel, and the parser is
  // done with.
  void maybe_splice() {
    if (splicing_ || !up_ || ex_.finished() || ex_.peer_gone()) return;
    const uint64_t left = parser_.sized_body_left();
    const bool until_close = parser_.in_close_delimited_body();
    if (left < kSpliceMinBytes && !until_close) return;
    pipe_ = svc_.pipes().take();
    if (!pipe_.valid()) return;  // out of descriptors: the buffered path still works
    splicing_ = true;
    splice_left_ = left;
    splice_until_close_ = until_close;
    splice_keep_alive_ = !until_close && parser_.keep_alive();
    // Close-delimited to an HTTP/1.1 client: each pipe load is one chunk.
    splice_chunked_ = client_framing_ == Exchange::Framing::chunked;
    up_->spliced_reads(true);
    upstream_paused_ = false;
    pump();
  }

  // Moves what it can both ways until both ends would block, then waits for
  // exactly one thing: the service readable (the pipe is empty) or the client
  // writable (the pipe holds bytes it cannot take yet). A slow client thus
  // stops the service reads, with at most one pipe's worth held.
  void pump() {
    if (!splicing_ || !up_ || pumping_) return;
    if (ex_.finished() || ex_.peer_gone()) {
      up_->want_data(false);  // stop() follows at the safe point
      return;
    }
    pumping_ = true;
    size_t moved = 0;
    bool in_blocked = false, out_blocked = false;
    while (true) {
      const bool want_in = !splice_eof_ && (splice_until_close_ || splice_left_ > 0);
      // (A chunk's size is announced before its bytes: no refill until sent.)
      in_blocked = !want_in || pipe_bytes_ >= pipe_.capacity || (splice_chunked_ && pipe_bytes_ > 0);
      if (!in_blocked) {
        size_t room = pipe_.capacity - pipe_bytes_;
        if (!splice_until_close_ && splice_left_ < room) room = static_cast<size_t>(splice_left_);
        ssize_t n = up_->splice_to_pipe(pipe_.write_fd, room);
        if (n > 0) {
          pipe_bytes_ += static_cast<size_t>(n);
          if (!splice_until_close_) splice_left_ -= static_cast<uint64_t>(n);
          if (splice_chunked_) ex_.begin_spliced_chunk(static_cast<size_t>(n));
        } else if (n == -EAGAIN) {
          in_blocked = true;  // no data yet, or the pipe is out of slots
        } else if (n == 0 && splice_until_close_) {
          splice_eof_ = true;  // the close is the end of this body
        } else {
          pumping_ = false;
          spdlog::debug("proxy to port {}: service closed mid-response ({})", port_, n == 0 ? "EOF" : strerror(-n));
          fail(502, codes::kBadGateway, "response truncated");
          return;
        }
      }
      if (pipe_bytes_ > 0) {
        ssize_t n = ex_.send_spliced(pipe_.read_fd, pipe_bytes_);
        if (n > 0) {
          pipe_bytes_ -= static_cast<size_t>(n);
          moved += static_cast<size_t>(n);
          last_moved_ms_ = now();
          out_blocked = false;
        } else if (n == -EAGAIN) {
          out_blocked = true;
        } else {
          pumping_ = false;
          if (n == -ENOSYS) {  // a transport that cannot splice: never left waiting
            fail(502, codes::kBadGateway, "cannot relay the body");
            return;
          }
          up_->want_data(false);  // the client is gone: the connection closes, stop() follows
          return;
        }
      } else {
        out_blocked = false;
      }
      if (pipe_bytes_ == 0 && (splice_eof_ || (!splice_until_close_ && splice_left_ == 0))) {
        pumping_ = false;
        finish_spliced();
        return;
      }
      if (out_blocked) {
        up_->want_data(false);  // proceed() resumes
        break;
      }
      if (in_blocked && pipe_bytes_ == 0) {
        up_->want_data(true);  // on_upstream_readable() resumes
        break;
      }
      if (moved >= kSpliceBytesPerWake) {
        // Fair to other connections: carry on from the next loop pass.
        if (pipe_bytes_ > 0) {
          up_->want_data(false);
          ex_.wait_writable();
        } else {
          up_->want_data(true);
        }
        break;
      }
    }
    pumping_ = false;
  }

  void finish_spliced() {
    reusable_ = splice_keep_alive_ && request_complete_ && !ex_.request().upgrade && up_ && up_->idle_writes() &&
                !up_->broken();
    if (up_) up_->spliced_reads(false);
    release_pipe();
    ex_.end();
    release_upstream(reusable_);
  }

  void release_pipe() {
    if (!pipe_.valid()) return;
    svc_.pipes().give(pipe_, pipe_bytes_ == 0);
    pipe_ = {};
    pipe_bytes_ = 0;
    splicing_ = false;
  }

  bool connect() {
    int err = 0;
    up_ = UpstreamConnection::connect(svc_.ctx().loop, port_, *this, err);
    return up_ != nullptr;
  }

  std::string refused_message() const {
    return "cannot connect to 127.0.0.1:" + std::to_string(port_);
  }

  // Answers with an error, or, once the response has begun, closes the
  // client connection: a cut-off body must not look complete.
  void fail(int status, std::string_view code, const std::string& message) {
    release_upstream(false);
    release_pipe();
    if (ex_.finished()) return;
    if (ex_.responding()) ex_.connection().close();
    else ex_.respond_error(status, code, message);
  }

  void release_upstream(bool reuse) {
    UpstreamConnection* up = up_;
    up_ = nullptr;
    if (!up) return;
    if (reuse) {
      up->reused = false;
      svc_.pool().put(up);
    } else {
      up->close();
    }
  }

  uint64_t now() const { return uv_now(svc_.ctx().loop); }

  ProxyService& svc_;
  Exchange& ex_;
  const int port_;
  const std::string head_;
  const BodyFraming body_;
  protocol::ResponseParser parser_;
  UpstreamConnection* up_ = nullptr;
  uint64_t started_ms_ = 0, deadline_ms_ = 0;
  uint64_t paused_since_ms_ = 0;  // the request body waits for the service since
  uint64_t last_moved_ms_ = 0;    // a response byte moved either way last
  bool request_complete_ = false, refused_at_start_ = false, body_started_ = false, retried_ = false;
  bool client_paused_ = false, upstream_paused_ = false, reusable_ = false, bogus_upgrade_ = false;
  Exchange::Framing client_framing_ = Exchange::Framing::sized;
  http::SplicePipes::Pipe pipe_;
  size_t pipe_bytes_ = 0;       // in the pipe, not yet taken by the client
  uint64_t splice_left_ = 0;    // of a sized body, not yet read from the service
  bool splicing_ = false, splice_until_close_ = false, splice_keep_alive_ = false, splice_eof_ = false;
  bool splice_chunked_ = false;
  bool pumping_ = false;
};

}  // namespace

void ProxyService::forward(http::Exchange& ex, int port, std::string head, protocol::BodyFraming body) {
  auto source = std::make_unique<ProxyExchange>(*this, ex, port, std::move(head), body);
  ProxyExchange* proxy = source.get();
  ex.attach(std::move(source));
  // The source lives as long as its exchange: the handler needs no cast.
  ex.on_complete = [proxy](Exchange&) { proxy->request_complete(); };
  proxy->start();
}

}  // namespace execd::proxy
