// protocol/proxy: the pure parts of the /proxy/{port} reverse proxy: the
// target split and port validation, the request head sent upstream (token
// and hop-by-hop headers gone, X-Forwarded-* set), an llhttp response parser
// for the service's answers, and the response head given back to the
// client. No sockets: execd/http/upstream and execd/api/proxy use these.
#pragma once

#include <llhttp.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "protocol/http.h"

namespace execd::protocol {

// "/proxy/8080/a/b?x=1" → port "8080", rest "/a/b?x=1"; "/proxy/8080" → rest
// "/"; "/proxy/8080?x" → rest "/?x". False unless the raw target starts with
// "/proxy/". The rest is the raw target bytes, never decoded.
bool split_proxy_target(std::string_view raw_target, std::string_view& port, std::string& rest);

// Canonical decimal 1-65535 ("80", not "080", "+80", "0x50"); 0 otherwise.
int parse_proxy_port(std::string_view text);

// How the request body travels upstream.
enum class BodyFraming { none, sized, chunked };
BodyFraming request_body_framing(const HttpRequest& req);

struct UpstreamRequestInfo {
  std::string_view target;     // the rest after /proxy/{port}
  std::string_view client_ip;  // X-Forwarded-For
  std::string_view prefix;     // X-Forwarded-Prefix: /proxy/{port}
  std::string_view host_fallback;  // Host when the client sent none (HTTP/1.0)
  BodyFraming body = BodyFraming::none;
};

// The HTTP/1.1 request head for the service: the client's headers in order
// (names in canonical case) minus hop-by-hop ones (RFC 9110 7.6.1: Connection
// and what it names, Keep-Alive, TE, Trailer, Transfer-Encoding, Upgrade,
// Proxy-*), minus X-EXECD-ACCESS-TOKEN and Expect (execd answered it), with
// Upgrade and "Connection: Upgrade" kept for an upgrade request, the body
// framing and X-Forwarded-For (appended), -Proto, -Host (the client's Host)
// and -Prefix set.
std::string upstream_request_head(const HttpRequest& req, const UpstreamRequestInfo& info);

// "10.0.0.1:5000" → "10.0.0.1"; "[::1]:5000" → "::1".
std::string_view peer_ip(std::string_view peer);

// "content-type" → "Content-Type".
std::string canonical_header_name(std::string_view name);

struct HttpResponseHead {
  int status = 0;
  std::string reason;
  int version_minor = 1;
  std::vector<std::pair<std::string, std::string>> headers;  // names as sent
  bool content_length = false;  // the body is sized
  bool has_body = true;         // false: HEAD, 1xx, 204, 304
  bool upgrade = false;         // 101 with Upgrade
  // First value of a header (case-insensitive), or nullptr.
  const std::string* header(std::string_view name) const;
};

// The service's header lines for the client, minus hop-by-hop headers
// (Upgrade and "Connection: Upgrade" kept for a 101). Framing headers
// (Content-Length) stay; Transfer-Encoding goes (the client side re-frames).
std::vector<std::string> client_response_headers(const HttpResponseHead& head);

class ResponseVisitor {
 public:
  virtual ~ResponseVisitor() = default;
  // A final (non-1xx, or 101) response head. 1xx interim responses are skipped.
  virtual void on_response_head(HttpResponseHead& head) = 0;
  virtual void on_response_body(const char* data, size_t len) = 0;
  // The response ended; `keep_alive`: the connection may carry another.
  virtual void on_response_complete(bool keep_alive) = 0;
};

// A push parser for one response (llhttp in response mode). It stops after
// the response is complete: `consumed` tells where; bytes after that are not
// part of it.
class ResponseParser {
 public:
  static constexpr size_t kMaxHeadBytes = 64 * 1024;
  enum class Result { need_more, complete, upgrade, error };

  explicit ResponseParser(ResponseVisitor& visitor);
  ResponseParser(const ResponseParser&) = delete;
  ResponseParser& operator=(const ResponseParser&) = delete;

  // The request was HEAD: the response has no body whatever it says.
  void set_head_request(bool head) { head_request_ = head; }
  Result feed(const char* data, size_t len, size_t& consumed);
  // The service closed: completes a body delimited by the close, else error
  // (a truncated response).
  Result finish();
  // Any byte of a response seen.
  bool started() const { return started_; }
  bool head_done() const { return head_done_; }
  bool done() const { return done_; }
  const std::string& error() const { return error_; }

  // Inside a final response's body, between feeds: what is left of a sized
  // body (0 outside one), or whether the body runs until the service closes.
  // A caller may move such bytes past the parser (splice) and end the
  // response itself; the parser is then done with.
  uint64_t sized_body_left() const;
  bool in_close_delimited_body() const;
  // The connection may carry another response after this one (valid once
  // the head is done).
  bool keep_alive() const { return llhttp_should_keep_alive(&parser_) != 0; }

 private:
  static int on_message_begin(llhttp_t*);
  static int on_status(llhttp_t*, const char*, size_t);
  static int on_header_field(llhttp_t*, const char*, size_t);
  static int on_header_value(llhttp_t*, const char*, size_t);
  static int on_headers_complete(llhttp_t*);
  static int on_body(llhttp_t*, const char*, size_t);
  static int on_message_complete(llhttp_t*);
  bool count_head(size_t n);

  llhttp_t parser_;
  llhttp_settings_t settings_;
  ResponseVisitor& visitor_;
  HttpResponseHead head_;
  bool field_done_ = false, head_request_ = false, started_ = false, head_done_ = false, done_ = false,
       interim_ = false, upgrade_ = false, failed_ = false;
  size_t head_bytes_ = 0;
  std::string error_;
};

}  // namespace execd::protocol
