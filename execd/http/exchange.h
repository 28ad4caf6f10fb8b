// execd/http/exchange: one request and its response on a Connection.
//
// Ownership: the Connection creates an Exchange when a request head is
// complete and is the only one that destroys it: at the safe point after the
// response ended, or when the connection closes. An Exchange owns the request
// and at most one Source (whatever produces the rest of the response: a
// command's events, a pool job's answer, a file). Handlers and sources hold
// plain references to their Exchange; they are valid until Source::stop() or
// until the response has ended, because frees are deferred to the safe point.
//
// Backpressure is pulled: send() answers false once the write queue is above
// its high-water mark; the source then waits for proceed(), which comes when
// the queue has fallen below the low-water mark. Producers never look at
// budgets themselves.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "execd/http/write_queue.h"
#include "protocol/http.h"
#include "protocol/router.h"

namespace execd::http {

class Connection;
class Exchange;

// Produces (the rest of) a response at the pace the peer reads it.
class Source {
 public:
  virtual ~Source() = default;
  // send() returned false earlier and the peer has since caught up.
  virtual void proceed() {}
  // The exchange is going away before the source ended it (the peer left,
  // the daemon is stopping). Must not touch the exchange afterwards.
  virtual void stop() {}
  // Periodic (the server tick, every 250 ms): keepalives, deadlines.
  virtual void tick(uint64_t now_ms) {}
  // Streamed request bodies (routes that ask for it at head time).
  virtual void on_body(const char* data, size_t len) {}
};

// A connection that left HTTP after a 101 (WebSocket): every further byte is
// its own. Owned by the Connection from Exchange::upgrade() on.
class Upgraded {
 public:
  virtual ~Upgraded() = default;
  virtual void on_data(const char* data, size_t len) = 0;
  virtual void proceed() {}
  // The connection is closing; no more calls after this one.
  virtual void stop() {}
  virtual void tick(uint64_t now_ms) {}
  // The peer shut its write side (EOF). True: handled, keep the connection
  // (a tunnel half-closing); false: the connection closes.
  virtual bool on_eof() { return false; }
};

class Exchange {
 public:
  explicit Exchange(Connection& conn) : conn_(conn) {}
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;
  ~Exchange();

  protocol::HttpRequest& request() { return request_; }
  const protocol::HttpRequest& request() const { return request_; }
  const std::string* header(std::string_view lower_name) const { return request_.header(lower_name); }
  Connection& connection() { return conn_; }
  const std::string& peer() const;

  // Set while routing (head time).
  protocol::RouteParams params;
  protocol::QueryParams query;
  // Runs when the whole request is in (body buffered, or streamed to the source).
  std::function<void(Exchange&)> on_complete;
  // The body goes to the attached source's on_body() instead of being buffered.
  bool stream_body = false;
  // Authorized and routed: an `Expect: 100-continue` gets its 100.
  bool invite_body = false;
  // The access token was checked and matched (the connection is trusted).
  bool authorized = false;

  // --- complete responses (the exchange ends) ---
  void respond(int status, std::string_view content_type, std::string_view body,
               const std::vector<std::string>& extra_headers = {});
  void respond_json(int status, std::string_view json) {
    respond(status, "application/json; charset=utf-8", json);
  }
  void respond_error(int status, std::string_view code, std::string_view message);
  void respond_empty(int status = 200) { respond(status, "", ""); }

  // --- streamed responses ---
  // Chunked body of unknown length. The head is queued; it goes out with the
  // first send(), or at once when `flush_now`.
  void begin_chunked(int status, std::vector<std::string> headers, bool flush_now = true);
  // A head whose `headers` carry Content-Length; the body follows.
  void begin_sized(int status, std::vector<std::string> headers, bool flush_now = true);
  // A head built from another server's answer (its own reason phrase). The
  // body that follows is `chunked`, sized by `headers`, or, with
  // `until_close`, delimited by closing the connection (HTTP/1.0 clients).
  enum class Framing { sized, chunked, until_close };
  void begin_relayed(int status, std::string_view reason, std::vector<std::string> headers, Framing framing);
  // Body bytes. False: the queue is above its high-water mark (or the peer is
  // gone); wait for Source::proceed() before sending more.
  bool send(std::string&& data);
  bool send(std::string_view data);
  // A file range; in a chunked response, one chunk.
  bool send_file(SharedFile file, uint64_t offset, uint64_t length);
  // Body bytes moved from `pipe_fd` to the peer in the kernel. Bytes moved;
  // -EAGAIN: wait for Source::proceed(); another -errno: the peer is gone
  // (-ENOSYS: the transport cannot splice). A chunked response must first
  // announce each chunk with begin_spliced_chunk().
  ssize_t send_spliced(int pipe_fd, size_t len);
  // Chunked responses: the size line of the next `len` bytes sent with
  // send_spliced() (their closing CRLF comes with the next chunk or end()).
  void begin_spliced_chunk(size_t len);
  // Source::proceed() once the peer can take more, though nothing is queued
  // (a source that yields to other connections before its peer is full).
  void wait_writable();
  void end();
  // The last body bytes and the end of the response in one write (a client
  // waiting for the end wakes once, not twice).
  void end(std::string&& last_data);
  // A spent write buffer to encode into (saves an allocation per send).
  std::string take_buffer();

  // The exchange owns `source` from now on.
  void attach(std::unique_ptr<Source> source);
  Source* source() { return source_.get(); }
  // Backpressure on a streamed request body.
  void pause_body();
  void resume_body();

  // After a 101 written with send_raw(): the connection belongs to `proto`.
  void send_raw(std::string_view bytes);
  // Ends a response written with send_raw() (a refused upgrade).
  void end_raw();
  void upgrade(std::unique_ptr<Upgraded> proto);

  bool request_complete() const { return request_complete_; }
  bool responding() const { return head_sent_ && !finished_; }
  bool finished() const { return finished_; }
  // The peer is gone (sends are dropped).
  bool peer_gone() const;

 private:
  friend class Connection;
  void queue_body(std::string&& data);
  void finish();
  void stop();

  Connection& conn_;
  protocol::HttpRequest request_;
  std::unique_ptr<Source> source_;
  bool request_complete_ = false, head_sent_ = false, chunked_ = false, finished_ = false;
  bool source_waiting_ = false;  // send() said "full"; proceed() is owed
  bool spliced_chunk_open_ = false;  // a spliced chunk still owes its CRLF
  bool stopped_ = false;
};

}  // namespace execd::http
