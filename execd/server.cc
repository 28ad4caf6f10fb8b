// execd/server: see header.
#include "execd/server.h"

#include <arpa/inet.h>
#include <spdlog/spdlog.h>

#include <cstring>

#include "protocol/errors.h"

namespace execd {

namespace {
// One read buffer for all connections: the loop is single-threaded and every
// read is parsed (or copied into pending_input_) before the next one.
constexpr size_t kReadBufferSize = 256 * 1024;
char g_read_buffer[kReadBufferSize];
// A client may pipeline this much while a response is in progress before we
// stop reading from it.
constexpr size_t kMaxPendingInput = 256 * 1024;

struct WriteReq {
  uv_write_t req;
  std::string data;
  std::weak_ptr<Connection> conn;
};
}  // namespace

Server::Server(uv_loop_t* loop, protocol::RequestParser::Limits limits, uint64_t idle_timeout_ms)
    : loop_(loop), limits_(limits), idle_timeout_ms_(idle_timeout_ms) {
  uv_tcp_init(loop, &listener_);
  listener_.data = this;
}

int Server::listen(const std::string& host, int port) {
  struct sockaddr_storage addr {};
  int rc = uv_ip4_addr(host.c_str(), port, reinterpret_cast<sockaddr_in*>(&addr));
  if (rc != 0) rc = uv_ip6_addr(host.c_str(), port, reinterpret_cast<sockaddr_in6*>(&addr));
  if (rc != 0) return rc;
  if ((rc = uv_tcp_bind(&listener_, reinterpret_cast<const sockaddr*>(&addr), 0)) != 0) return rc;
  if ((rc = uv_listen(reinterpret_cast<uv_stream_t*>(&listener_), 1024, on_connection)) != 0) return rc;
  listening_ = true;
  return 0;
}

int Server::bound_port() const {
  struct sockaddr_storage addr {};
  int len = sizeof addr;
  if (uv_tcp_getsockname(&listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
}

void Server::stop_accepting() {
  draining_ = true;
  if (listening_) {
    listening_ = false;
    uv_close(reinterpret_cast<uv_handle_t*>(&listener_), nullptr);
  }
}

void Server::close_idle_connections() {
  for (Connection* c = first_; c;) {
    Connection* next = c->next_;
    if (!c->in_request_ && !c->upgraded_) c->close();
    c = next;
  }
}

void Server::close_all_connections() {
  for (Connection* c = first_; c;) {
    Connection* next = c->next_;
    c->close();
    c = next;
  }
}

void Server::on_connection(uv_stream_t* listener, int status) {
  auto* server = static_cast<Server*>(listener->data);
  if (status < 0) {
    spdlog::warn("accept failed: {}", uv_strerror(status));
    return;
  }
  auto* conn = new Connection(*server);
  if (uv_accept(listener, reinterpret_cast<uv_stream_t*>(&conn->tcp_)) != 0) {
    conn->close();
    return;
  }
  conn->start();
}

Connection::Connection(Server& server)
    : server_(server), self_(this, [](Connection* c) { delete c; }), parser_(*this, server.limits_) {
  uv_tcp_init(server.loop_, &tcp_);
  tcp_.data = this;
  uv_timer_init(server.loop_, &idle_timer_);
  idle_timer_.data = this;
  open_handles_ = 2;
  ++server_.connections_;
  next_ = server_.first_;
  if (next_) next_->prev_ = this;
  server_.first_ = this;
}

Connection::~Connection() {
  --server_.connections_;
  if (prev_) prev_->next_ = next_; else server_.first_ = next_;
  if (next_) next_->prev_ = prev_;
}

void Connection::start() {
  uv_tcp_nodelay(&tcp_, 1);
  struct sockaddr_storage addr {};
  int len = sizeof addr;
  if (uv_tcp_getpeername(&tcp_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    char ip[64] = "";
    if (addr.ss_family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(&addr);
      uv_ip4_name(a, ip, sizeof ip);
      peer_ = std::string(ip) + ":" + std::to_string(ntohs(a->sin_port));
    } else {
      auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
      uv_ip6_name(a, ip, sizeof ip);
      peer_ = std::string("[") + ip + "]:" + std::to_string(ntohs(a->sin6_port));
    }
  }
  resume_reading();
  arm_idle_timer();
}

void Connection::arm_idle_timer() {
  if (closing_ || server_.idle_timeout_ms_ == 0) return;
  uv_timer_start(&idle_timer_, [](uv_timer_t* t) {
    auto* c = static_cast<Connection*>(t->data);
    spdlog::debug("{}: closing idle connection", c->peer_);
    c->close();
  }, server_.idle_timeout_ms_, 0);
}

void Connection::on_alloc(uv_handle_t*, size_t, uv_buf_t* buf) {
  buf->base = g_read_buffer;
  buf->len = kReadBufferSize;
}

void Connection::on_read(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
  auto* self = static_cast<Connection*>(stream->data);
  if (nread == 0) return;
  if (nread < 0) {
    // EOF or reset. A half-close is treated as a disconnect: execd answers
    // one request at a time, and no SDK half-closes.
    self->close();
    return;
  }
  auto keep = self->self_;
  if (!self->in_request_) self->arm_idle_timer();  // the client is talking
  if (self->raw_reader_) {
    self->raw_reader_(buf->base, static_cast<size_t>(nread));
    return;
  }
  if (self->pending_input_.empty()) {
    self->process_input(buf->base, static_cast<size_t>(nread));
  } else {
    self->pending_input_.append(buf->base, static_cast<size_t>(nread));
    self->process_input();
  }
}

void Connection::pause_reading() {
  read_paused_ = true;
  if (reading_) {
    uv_read_stop(reinterpret_cast<uv_stream_t*>(&tcp_));
    reading_ = false;
  }
}

void Connection::resume_reading() {
  read_paused_ = false;
  if (!reading_ && !closing_ && !shutting_down_) {
    uv_read_start(reinterpret_cast<uv_stream_t*>(&tcp_), on_alloc, on_read);
    reading_ = true;
  }
}

void Connection::process_input(const char* data, size_t len) {
  // `data` (the shared read buffer) is parsed in place when nothing is
  // pending, saving a copy of every upload byte; what is not consumed is kept.
  const bool external = data != nullptr;
  auto input = [&] { return external ? std::string_view(data, len) : std::string_view(pending_input_); };
  auto consume = [&](size_t n) {
    if (external) {
      data += n;
      len -= n;
    } else {
      pending_input_.erase(0, n);
    }
  };
  while (!in_request_ && !closing_ && !shutting_down_ && !input().empty()) {
    size_t consumed = 0;
    parsing_ = true;
    auto result = parser_.feed(input().data(), input().size(), consumed);
    parsing_ = false;
    if (closing_) return;
    consume(consumed);
    switch (result) {
      case protocol::RequestParser::Result::need_more:
        break;
      case protocol::RequestParser::Result::paused:
        parser_.resume();
        break;
      case protocol::RequestParser::Result::upgrade:
        // Either the handler took the connection over (WebSocket) and now
        // reads the rest, or it refused the upgrade and the connection closes.
        if (raw_reader_ && !input().empty()) {
          std::string rest(input());
          consume(rest.size());
          raw_reader_(rest.data(), rest.size());
        }
        return;
      case protocol::RequestParser::Result::error:
        fail_request(parser_.error().status, parser_.error().message);
        return;
    }
  }
  if (external && len > 0) pending_input_.append(data, len);
  // Bound what a pipelining client can make us hold.
  if (in_request_ && pending_input_.size() > kMaxPendingInput && !read_paused_) {
    uv_read_stop(reinterpret_cast<uv_stream_t*>(&tcp_));
    reading_ = false;
  }
}

void Connection::fail_request(int status, const std::string& message) {
  spdlog::debug("{}: rejecting request: {} {}", peer_, status, message);
  keep_alive_ = false;
  in_request_ = true;
  std::string body = protocol::error_body(protocol::code_for_status(status), message);
  queue_write(protocol::simple_response(status, "application/json; charset=utf-8", body, false));
  shutdown_after_writes();
}

protocol::BodyMode Connection::on_request_head(protocol::HttpRequest& req) {
  // in_request_ is set only once the whole request is in: the body may
  // still be on its way in later reads.
  body_sink_ = nullptr;
  if (server_.head_handler_) return server_.head_handler_(*this, req);
  return protocol::BodyMode::buffer;
}

void Connection::on_body(const char* data, size_t len) {
  if (body_sink_) body_sink_(data, len);
}

int Connection::socket_fd() const {
  uv_os_fd_t fd = -1;
  uv_fileno(reinterpret_cast<const uv_handle_t*>(&tcp_), &fd);
  return fd;
}

void Connection::on_request(protocol::HttpRequest& req) {
  in_request_ = true;
  uv_timer_stop(&idle_timer_);  // answering: our turn, however long it takes
  keep_alive_ = req.keep_alive && !server_.draining_;
  upgraded_ = req.upgrade;
  server_.handler_(*this, req);
}

void Connection::queue_write(std::string data) {
  if (closing_ || data.empty()) return;
  uv_buf_t buf = uv_buf_init(data.data(), static_cast<unsigned>(data.size()));
  if (queued_bytes_ == 0) {
    int n = uv_try_write(reinterpret_cast<uv_stream_t*>(&tcp_), &buf, 1);
    if (n == static_cast<int>(data.size())) return;
    if (n > 0) data.erase(0, static_cast<size_t>(n));
    else if (n != UV_EAGAIN && n != UV_ENOSYS) {
      close();
      return;
    }
  }
  auto* w = new WriteReq{{}, std::move(data), self_};
  w->req.data = w;
  buf = uv_buf_init(w->data.data(), static_cast<unsigned>(w->data.size()));
  queued_bytes_ += w->data.size();
  int rc = uv_write(&w->req, reinterpret_cast<uv_stream_t*>(&tcp_), &buf, 1, [](uv_write_t* req, int status) {
    auto* w = static_cast<WriteReq*>(req->data);
    std::unique_ptr<WriteReq> owned(w);
    auto conn = w->conn.lock();
    if (!conn) return;
    conn->queued_bytes_ -= w->data.size();
    if (status < 0) {
      conn->close();
      return;
    }
    if (conn->observer_ && conn->queued_bytes_ <= kStreamBudget / 2) conn->observer_->on_writable();
  });
  if (rc != 0) {
    queued_bytes_ -= w->data.size();
    delete w;
    close();
  }
}

void Connection::respond(int status, std::string_view content_type, std::string_view body,
                         const std::vector<std::string>& extra_headers) {
  if (upgraded_) keep_alive_ = false;  // a refused upgrade: llhttp cannot go back to HTTP
  queue_write(protocol::simple_response(status, content_type, body, keep_alive_, extra_headers));
  response_done();
}

void Connection::respond_error(int status, std::string_view code, std::string_view message) {
  respond_json(status, protocol::error_body(code, message));
}

void Connection::begin_stream(int status, const std::vector<std::string>& headers, StreamObserver* observer) {
  std::vector<std::string> h = headers;
  h.emplace_back("Transfer-Encoding: chunked");
  if (!keep_alive_) h.emplace_back("Connection: close");
  streaming_ = true;
  observer_ = observer;
  queue_write(protocol::response_head(status, h));
}

void Connection::stream_write(std::string_view data) {
  if (data.empty()) return;
  std::string chunk;
  chunk.reserve(data.size() + 16);
  protocol::append_chunk(chunk, data);
  queue_write(std::move(chunk));
}

void Connection::end_stream() {
  if (!streaming_) return;
  streaming_ = false;
  observer_ = nullptr;
  queue_write(std::string(protocol::kLastChunk));
  response_done();
}

void Connection::write_raw(std::string data) { queue_write(std::move(data)); }

void Connection::take_over(RawReader on_data, StreamObserver* observer) {
  raw_reader_ = std::move(on_data);
  observer_ = observer;
  in_request_ = true;  // never parse HTTP on this connection again
  uv_timer_stop(&idle_timer_);  // the new protocol keeps its own deadlines
  if (!parsing_ && !pending_input_.empty()) {
    std::string rest;
    rest.swap(pending_input_);
    raw_reader_(rest.data(), rest.size());
  }
}

void Connection::finish_raw_response() { response_done(); }

void Connection::response_done() {
  if (closing_) return;
  in_request_ = false;
  arm_idle_timer();
  if (!keep_alive_) {
    shutdown_after_writes();
    return;
  }
  if (!reading_ && !read_paused_) resume_reading();
  // A response written from inside the parser's callback is picked up by the
  // loop in process_input; only a later (asynchronous) one restarts parsing.
  if (!parsing_) process_input();
}

void Connection::shutdown_after_writes() {
  if (shutting_down_ || closing_) return;
  shutting_down_ = true;
  if (reading_) {
    uv_read_stop(reinterpret_cast<uv_stream_t*>(&tcp_));
    reading_ = false;
  }
  auto* req = new uv_shutdown_t;
  req->data = this;
  if (uv_shutdown(req, reinterpret_cast<uv_stream_t*>(&tcp_), [](uv_shutdown_t* req, int) {
        auto* c = static_cast<Connection*>(req->data);
        delete req;
        c->close();
      }) != 0) {
    delete req;
    close();
  }
}

void Connection::close() {
  if (closing_) return;
  closing_ = true;
  StreamObserver* o = observer_;
  observer_ = nullptr;
  if (o) o->on_closed();
  auto on_closed = [](uv_handle_t* h) {
    auto* c = static_cast<Connection*>(h->data);
    if (--c->open_handles_ == 0) c->self_.reset();  // last owner: frees the connection
  };
  uv_timer_stop(&idle_timer_);
  uv_close(reinterpret_cast<uv_handle_t*>(&idle_timer_), on_closed);
  uv_close(reinterpret_cast<uv_handle_t*>(&tcp_), on_closed);
}

}  // namespace execd
