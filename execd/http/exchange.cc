// execd/http/exchange: see header.
#include "execd/http/exchange.h"

#include <errno.h>

#include <cstdio>

#include "execd/http/connection.h"
#include "protocol/errors.h"

namespace execd::http {

Exchange::~Exchange() = default;

const std::string& Exchange::peer() const { return conn_.peer(); }

bool Exchange::peer_gone() const { return conn_.closing(); }

void Exchange::respond(int status, std::string_view content_type, std::string_view body,
                       const std::vector<std::string>& extra_headers) {
  if (finished_) return;
  if (!conn_.closing()) {
    // Answered before the request ended: the connection closes after it.
    bool keep_alive = conn_.keep_alive() && request_complete_;
    conn_.queue().append(protocol::simple_response(status, content_type, body, keep_alive, extra_headers));
    conn_.flush();
  }
  head_sent_ = true;
  finish();
}

void Exchange::respond_error(int status, std::string_view code, std::string_view message) {
  respond_json(status, protocol::error_body(code, message));
}

void Exchange::begin_chunked(int status, std::vector<std::string> headers, bool flush_now) {
  if (request_.version_minor < 1) {
    // An HTTP/1.0 client knows no chunked encoding: the body ends when the
    // connection does.
    conn_.keep_alive_ = false;
  } else {
    headers.emplace_back("Transfer-Encoding: chunked");
    chunked_ = true;
  }
  begin_sized(status, std::move(headers), flush_now);
}

void Exchange::begin_sized(int status, std::vector<std::string> headers, bool flush_now) {
  if (finished_ || head_sent_) return;
  if (!conn_.keep_alive() || !request_complete_) headers.emplace_back("Connection: close");
  head_sent_ = true;
  if (conn_.closing()) return;
  conn_.queue().append(protocol::response_head(status, headers));
  if (flush_now) conn_.flush();
}

void Exchange::begin_relayed(int status, std::string_view reason, std::vector<std::string> headers,
                             Framing framing) {
  if (finished_ || head_sent_) return;
  if (framing == Framing::chunked) {
    headers.emplace_back("Transfer-Encoding: chunked");
    chunked_ = true;
  }
  if (framing == Framing::until_close) conn_.keep_alive_ = false;
  if (!conn_.keep_alive()) headers.emplace_back("Connection: close");
  head_sent_ = true;
  if (conn_.closing()) return;
  conn_.queue().append(protocol::response_head(status, reason, headers));
  conn_.flush();
}

namespace {
void append_chunk_size(WriteQueue& q, uint64_t size) {
  char head[24];
  int n = snprintf(head, sizeof head, "%llx\r\n", static_cast<unsigned long long>(size));
  q.append(std::string_view(head, static_cast<size_t>(n)));
}
}  // namespace

void Exchange::queue_body(std::string&& data) {
  if (data.empty()) return;
  WriteQueue& q = conn_.queue();
  if (chunked_) {
    append_chunk_size(q, data.size());
    q.append(std::move(data));
    q.append(std::string_view("\r\n"));
  } else {
    q.append(std::move(data));
  }
}

bool Exchange::send(std::string&& data) {
  if (finished_ || conn_.closing()) return false;
  queue_body(std::move(data));
  bool more = conn_.flush();
  if (!more) source_waiting_ = true;
  return more;
}

bool Exchange::send(std::string_view data) {
  std::string copy = take_buffer();
  copy.assign(data);
  return send(std::move(copy));
}

bool Exchange::send_file(SharedFile file, uint64_t offset, uint64_t length) {
  if (finished_ || conn_.closing()) return false;
  WriteQueue& q = conn_.queue();
  if (chunked_ && length > 0) {
    // One chunk for the whole range (spilled execution output).
    append_chunk_size(q, length);
    q.append_file(std::move(file), offset, length);
    q.append(std::string_view("\r\n"));
  } else {
    q.append_file(std::move(file), offset, length);
  }
  bool more = conn_.flush();
  if (!more) source_waiting_ = true;
  return more;
}

ssize_t Exchange::send_spliced(int pipe_fd, size_t len) {
  if (finished_ || conn_.closing() || (chunked_ && !spliced_chunk_open_)) return -EPIPE;
  ssize_t n = conn_.splice_from_pipe(pipe_fd, len);
  if (n == -EAGAIN) source_waiting_ = true;
  return n;
}

void Exchange::begin_spliced_chunk(size_t len) {
  if (finished_ || conn_.closing() || !chunked_ || len == 0) return;
  char line[32];
  int n = snprintf(line, sizeof line, "%s%zx\r\n", spliced_chunk_open_ ? "\r\n" : "", len);
  conn_.queue().append(std::string_view(line, static_cast<size_t>(n)));
  spliced_chunk_open_ = true;
}

void Exchange::wait_writable() {
  if (finished_ || conn_.closing()) return;
  source_waiting_ = true;
  conn_.wait_writable();
}

void Exchange::end() {
  if (finished_) return;
  if (chunked_ && !conn_.closing()) {
    if (spliced_chunk_open_) conn_.queue().append(std::string_view("\r\n"));
    conn_.queue().append(protocol::kLastChunk);
    conn_.flush();
  }
  finish();
}

void Exchange::end(std::string&& last_data) {
  if (finished_) return;
  if (!conn_.closing()) {
    queue_body(std::move(last_data));
    if (chunked_) conn_.queue().append(protocol::kLastChunk);
    conn_.flush();
  }
  finish();
}

void Exchange::end_raw() { finish(); }

std::string Exchange::take_buffer() { return conn_.queue().take_buffer(); }

void Exchange::attach(std::unique_ptr<Source> source) { source_ = std::move(source); }

void Exchange::pause_body() { conn_.pause_reading(); }

void Exchange::resume_body() { conn_.resume_reading(); }

void Exchange::send_raw(std::string_view bytes) {
  if (finished_ || conn_.closing()) return;
  head_sent_ = true;
  conn_.queue().append(bytes);
  conn_.flush();
}

void Exchange::upgrade(std::unique_ptr<Upgraded> proto) {
  if (finished_) return;
  finished_ = true;
  conn_.upgrade(*this, std::move(proto));
}

void Exchange::finish() {
  finished_ = true;
  conn_.exchange_finished(*this);
}

void Exchange::stop() {
  if (stopped_) return;
  stopped_ = true;
  if (source_ && !finished_) source_->stop();
}

}  // namespace execd::http
