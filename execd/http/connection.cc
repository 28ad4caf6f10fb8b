// execd/http/connection: see header.
#include "execd/http/connection.h"

#include <errno.h>
#include <string.h>
#include <spdlog/spdlog.h>

#include "protocol/errors.h"

namespace execd::http {

namespace {
// One flush writes at most this much before letting the loop serve others.
constexpr size_t kMaxBytesPerFlush = 32u << 20;
constexpr size_t kSendfileSlice = 16u << 20;
}  // namespace

Connection::Connection(ConnectionHost& host, const ConnectionLimits& limits)
    : host_(host), limits_(limits), parser_(*this, limits.parser) {}

Connection::~Connection() = default;

void Connection::start(Transport* transport, std::string peer) {
  transport_ = transport;
  peer_ = std::move(peer);
  idle_since_ms_ = host_.now_ms();
  update_reading();
}

// ---------------------------------------------------------------------------
// Reading

void Connection::update_reading() {
  if (!transport_ || transport_closed_ || close_requested_) return;
  bool want;
  if (lingering_) want = true;
  else if (peer_eof_) want = false;
  else if (upgraded_) want = !read_paused_;
  else if (parser_done_) want = false;
  else if (exchange_ && !exchange_->request_complete_) want = !read_paused_;
  else if (exchange_) want = pending_input_.size() < kMaxPendingInput;  // pipelined input waits, bounded
  else want = true;
  if (want == reading_) return;
  reading_ = want;
  transport_->want_readable(want);
}

void Connection::pause_reading() {
  read_paused_ = true;
  update_reading();
}

void Connection::resume_reading() {
  read_paused_ = false;
  update_reading();
}

void Connection::on_transport_data(const char* data, size_t len) {
  if (close_requested_ || lingering_) return;  // lingering: the peer's input is discarded
  idle_since_ms_ = host_.now_ms();
  if (!exchange_ && !upgraded_ && head_started_ms_ == 0) head_started_ms_ = idle_since_ms_;
  if (upgraded_) {
    upgraded_->on_data(data, len);
    return;
  }
  if (parser_done_) return;
  if ((exchange_ && exchange_->request_complete_) || !pending_input_.empty()) {
    pending_input_.append(data, len);
    if (!exchange_ || !exchange_->request_complete_) process_input(nullptr, 0);
    update_reading();
    return;
  }
  process_input(data, len);
}

void Connection::on_transport_error(int) { peer_reset_ = true; }

void Connection::on_transport_eof() {
  // A half-close is treated as a disconnect: execd answers one request at a
  // time and no client it serves half-closes. Upgraded protocols may differ
  // (a proxied tunnel passes the half-close on); a reset is never a half-close.
  if (upgraded_ && !lingering_ && !close_requested_ && !peer_reset_ && upgraded_->on_eof()) {
    peer_eof_ = true;
    reading_ = false;  // the transport stopped reading by itself
    return;
  }
  close();
}

void Connection::process_input(const char* data, size_t len) {
  // Parses `data` in place when given (the shared read buffer: saves a copy of
  // every upload byte), else pending_input_; what is not parsed stays pending.
  const bool external = data != nullptr;
  std::string_view in = external ? std::string_view(data, len) : std::string_view(pending_input_);
  size_t used = 0;
  while (used < in.size() && !close_requested_ && !parser_done_ && !(exchange_ && exchange_->request_complete_)) {
    size_t consumed = 0;
    auto result = parser_.feed(in.data() + used, in.size() - used, consumed);
    used += consumed;
    if (close_requested_) return;  // everything is dropped at the safe point
    if (result == protocol::RequestParser::Result::paused) {
      parser_.resume();
    } else if (result == protocol::RequestParser::Result::upgrade) {
      parser_done_ = true;  // llhttp cannot go back to HTTP after an upgrade
      std::string rest(in.substr(used));
      if (upgraded_) {
        if (!external) pending_input_.clear();
        if (!rest.empty()) upgraded_->on_data(rest.data(), rest.size());
        update_reading();
        return;
      }
      // The upgrade may still be decided (a proxied service answering 101
      // later): what followed the head waits for the upgraded protocol.
      pending_input_ = std::move(rest);
      update_reading();
      return;
    } else if (result == protocol::RequestParser::Result::error) {
      reject(parser_.error().status, parser_.error().message);
      return;
    }
  }
  if (external) pending_input_.append(data + used, len - used);
  else pending_input_.erase(0, used);
  update_reading();
}

protocol::BodyMode Connection::on_request_head(protocol::HttpRequest& req) {
  head_started_ms_ = 0;
  exchange_ = std::make_unique<Exchange>(*this);
  // The parser keeps appending a buffered body to its own (moved-from) copy;
  // on_request hands it over.
  exchange_->request_ = std::move(req);
  read_paused_ = false;
  Exchange* ex = exchange_.get();
  host_.on_request_head(*ex);
  if (ex->authorized) trusted_ = true;
  // Answered at head time (or closing): the body is read past, never held.
  if (close_requested_ || !exchange_) return protocol::BodyMode::stream;
  if (exchange_->invite_body) {
    // curl waits a second for this before sending a body over 1 KiB.
    const std::string* expect = exchange_->header("expect");
    if (expect && protocol::equals_ignoring_ascii_case(*expect, "100-continue")) {
      queue_.append(std::string_view("HTTP/1.1 100 Continue\r\n\r\n"));
      flush();
    }
  }
  return exchange_->stream_body ? protocol::BodyMode::stream : protocol::BodyMode::buffer;
}

void Connection::on_body(const char* data, size_t len) {
  if (exchange_ && exchange_->source_ && !exchange_->finished_) exchange_->source_->on_body(data, len);
}

void Connection::on_request(protocol::HttpRequest& req) {
  if (!exchange_) return;  // answered before its body ended; the connection closes
  Exchange& ex = *exchange_;
  ex.request_.body = std::move(req.body);
  ex.request_complete_ = true;
  // A refused upgrade cannot go back to HTTP: llhttp stops parsing after it.
  keep_alive_ = keep_alive_ && req.keep_alive && !req.upgrade && !host_.draining();
  if (ex.on_complete) ex.on_complete(ex);
  else ex.respond_error(404, protocol::codes::kNotFound, "no route");
  update_reading();
}

void Connection::reject(int status, const std::string& message) {
  spdlog::debug("{}: rejecting request: {} {}", peer_, status, message);
  keep_alive_ = false;
  parser_done_ = true;
  if (exchange_) {
    // A request whose body broke a limit mid-way: its source (an upload) is stopped.
    exchange_->stop();
    exchange_->finished_ = true;
    retired_.push_back(std::move(exchange_));
    schedule();
  }
  std::string body = protocol::error_body(protocol::code_for_status(status), message);
  queue_.append(protocol::simple_response(status, "application/json; charset=utf-8", body, false));
  flush();
  close_after_writes();
}

// ---------------------------------------------------------------------------
// Exchanges

void Connection::exchange_finished(Exchange& ex) {
  if (exchange_.get() != &ex) return;
  if (!ex.request_complete_) {
    // Answered before the body ended: the rest of the body is not read.
    keep_alive_ = false;
    parser_done_ = true;
  }
  retired_.push_back(std::move(exchange_));
  idle_since_ms_ = host_.now_ms();
  // A pipelined request already waiting: its head deadline starts now.
  head_started_ms_ = pending_input_.empty() ? 0 : idle_since_ms_;
  queue_.drop_spares();
  if (!keep_alive_) close_after_writes();
  schedule();  // frees it, and parses what was pipelined meanwhile
  update_reading();
}

void Connection::upgrade(Exchange& ex, std::unique_ptr<Upgraded> proto) {
  if (exchange_.get() != &ex) return;
  retired_.push_back(std::move(exchange_));
  upgraded_ = std::move(proto);
  parser_done_ = true;
  read_paused_ = false;
  schedule();
  update_reading();
}

// ---------------------------------------------------------------------------
// Writing

bool Connection::flush() {
  if (transport_closed_ || close_requested_ || !transport_) return false;
  if (write_blocked_) return !queue_.above_high_water();
  size_t written = 0;
  while (!queue_.empty()) {
    if (written >= kMaxBytesPerFlush) {
      // Fair to the other connections: continue on the next writable event.
      write_blocked_ = true;
      transport_->want_writable(true);
      return !queue_.above_high_water();
    }
    ssize_t n;
    if (queue_.head_is_file()) {
      uint64_t left = queue_.head_file_remaining();
      n = transport_->sendfile(queue_.head_fd(), queue_.head_file_offset(),
                               static_cast<size_t>(left < kSendfileSlice ? left : kSendfileSlice));
      if (n == 0) n = -EIO;  // the file shrank: the response cannot be completed honestly
    } else {
      struct iovec iov[WriteQueue::kMaxIov];
      int count = queue_.gather(iov, WriteQueue::kMaxIov);
      n = transport_->writev(iov, count);
    }
    if (n > 0) {
      queue_.consume(static_cast<size_t>(n));
      written += static_cast<size_t>(n);
      continue;
    }
    if (n == -EAGAIN || n == -EWOULDBLOCK) {
      write_blocked_ = true;
      transport_->want_writable(true);
      return !queue_.above_high_water();
    }
    spdlog::debug("{}: write failed: {}", peer_, strerror(static_cast<int>(-n)));
    close();
    return false;
  }
  writes_progressed();
  return true;
}

ssize_t Connection::splice_from_pipe(int pipe_fd, size_t len) {
  if (transport_closed_ || close_requested_ || !transport_) return -EPIPE;
  if (!queue_.empty()) {
    flush();
    if (close_requested_) return -EPIPE;
    if (!queue_.empty()) return -EAGAIN;  // flush() waits for writable
  }
  if (write_blocked_) return -EAGAIN;
  ssize_t n = transport_->splice_from_pipe(pipe_fd, len);
  if (n > 0) return n;
  if (n == -EAGAIN || n == -EWOULDBLOCK) {
    write_blocked_ = true;
    transport_->want_writable(true);
    return -EAGAIN;
  }
  if (n == 0) n = -EPIPE;  // an empty pipe: the caller's accounting is wrong
  if (n != -ENOSYS) {
    spdlog::debug("{}: splice failed: {}", peer_, strerror(static_cast<int>(-n)));
    close();
  }
  return n;
}

void Connection::wait_writable() {
  if (transport_closed_ || close_requested_ || !transport_ || write_blocked_) return;
  write_blocked_ = true;
  transport_->want_writable(true);
}

void Connection::on_transport_writable() {
  if (close_requested_) return;
  write_blocked_ = false;
  transport_->want_writable(false);
  flush();
  if (close_requested_ || !queue_.below_low_water()) return;
  if (upgraded_) {
    upgraded_->proceed();
  } else if (exchange_ && exchange_->source_waiting_) {
    exchange_->source_waiting_ = false;
    if (exchange_->source_) exchange_->source_->proceed();
  }
}

void Connection::shutdown_write_when_flushed() {
  if (close_requested_ || transport_closed_ || !transport_) return;
  shutdown_pending_ = true;
  if (queue_.empty()) writes_progressed();
}

void Connection::writes_progressed() {
  if (shutdown_pending_ && queue_.empty() && !close_requested_) {
    shutdown_pending_ = false;
    transport_->shutdown_write();
  }
  if (!close_after_writes_ || lingering_ || !queue_.empty() || close_requested_) return;
  // Lingering close: shut our side, then read and discard until the peer
  // closes (or kLingerMs), so its unread input cannot turn into a reset that
  // destroys the response before the peer read it.
  lingering_ = true;
  linger_since_ms_ = host_.now_ms();
  transport_->shutdown_write();
  update_reading();
}

void Connection::close_after_writes() {
  close_after_writes_ = true;
  if (queue_.empty()) writes_progressed();
}

// ---------------------------------------------------------------------------
// Closing and the safe point

void Connection::close() {
  if (close_requested_) return;
  close_requested_ = true;
  queue_.clear();
  if (transport_ && !transport_closed_) {
    transport_->want_readable(false);
    transport_->want_writable(false);
  }
  reading_ = false;
  schedule();
}

void Connection::schedule() {
  if (scheduled_ || transport_closed_) return;
  scheduled_ = true;
  host_.schedule(*this);
}

void Connection::run_deferred() {
  scheduled_ = false;
  if (close_requested_) {
    if (transport_closed_) return;
    if (exchange_) exchange_->stop();
    if (upgraded_) upgraded_->stop();
    exchange_.reset();
    upgraded_.reset();
    retired_.clear();
    transport_closed_ = true;
    scheduled_ = false;
    if (transport_) transport_->close();  // on_transport_closed() follows
    else host_.on_connection_closed(*this);
    return;
  }
  retired_.clear();
  if (upgraded_ && !pending_input_.empty()) {
    // Bytes that followed the head of a request upgraded after it was parsed.
    std::string rest = std::move(pending_input_);
    pending_input_.clear();
    upgraded_->on_data(rest.data(), rest.size());
    if (close_requested_) return;
  }
  if (!exchange_ && !upgraded_ && !parser_done_ && !pending_input_.empty()) process_input(nullptr, 0);
  update_reading();
}

void Connection::on_transport_closed() {
  transport_ = nullptr;
  host_.on_connection_closed(*this);  // frees this
}

void Connection::tick(uint64_t now_ms) {
  if (close_requested_) return;
  if (lingering_) {
    if (now_ms - linger_since_ms_ >= kLingerMs) close();
    return;
  }
  if (upgraded_) {
    upgraded_->tick(now_ms);
    return;
  }
  if (exchange_ && exchange_->source_) exchange_->source_->tick(now_ms);
  if (close_requested_ || parser_done_ || (exchange_ && exchange_->request_complete_)) return;
  if (exchange_) {
    // Inside a request body: each silence is bounded, however slowly the
    // bytes trickle in overall (a paused body is our choice, not the client's).
    if (read_paused_) return;
    uint64_t silent = now_ms - idle_since_ms_;
    if ((limits_.body_timeout_ms && silent >= limits_.body_timeout_ms) ||
        (limits_.idle_timeout_ms && silent >= limits_.idle_timeout_ms)) {
      spdlog::debug("{}: request body timed out", peer_);
      if (exchange_->head_sent_) close();
      else reject(408, "request body timed out");
    }
    return;
  }
  // A head must be complete within the deadline from its first byte, so a
  // client trickling a byte at a time cannot hold the connection.
  if (head_started_ms_ != 0 && limits_.header_timeout_ms && now_ms - head_started_ms_ >= limits_.header_timeout_ms) {
    spdlog::debug("{}: request head timed out", peer_);
    reject(408, "request head timed out");
    return;
  }
  if (limits_.idle_timeout_ms && now_ms - idle_since_ms_ >= limits_.idle_timeout_ms) {
    spdlog::debug("{}: closing idle connection", peer_);
    close();
  }
}

}  // namespace execd::http
