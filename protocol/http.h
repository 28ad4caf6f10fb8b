// protocol/http: HTTP/1.1 request parsing on llhttp, and response heads.
//
// RequestParser is a push parser with no socket: bytes go in through feed(),
// the owner learns about requests through a small visitor. It enforces the
// header and body limits (431, 413) and turns malformed input into 400.
// After each complete request it pauses, so the owner finishes the response
// before the next pipelined request is parsed (HTTP/1.1 ordering).
#pragma once

#include <llhttp.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace execd::protocol {

struct HttpRequest {
  std::string method;
  std::string target;  // raw request target
  std::string path;    // percent-decoded path, no query
  std::string query;   // raw query string
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  bool keep_alive = true;
  bool upgrade = false;
  int version_minor = 1;  // HTTP/1.<minor>

  // First value of a header (name must be lower-case), or nullptr.
  const std::string* header(std::string_view lower_name) const;
};

// How the owner wants the body of the request it was just shown.
enum class BodyMode { buffer, stream };

class RequestVisitor {
 public:
  virtual ~RequestVisitor() = default;
  // Headers are complete. Return stream to receive the body through on_body.
  virtual BodyMode on_request_head(HttpRequest& req) = 0;
  virtual void on_body(const char* data, size_t len) = 0;
  // The request (and its body, if buffered) is complete.
  virtual void on_request(HttpRequest& req) = 0;
};

struct ParseError {
  int status = 400;
  std::string message;
};

class RequestParser {
 public:
  struct Limits {
    // The request line and every header line as sent, each header also
    // charged kHeaderOverhead for what it costs to hold (so many tiny headers
    // cost as much as a few long ones).
    size_t max_head_bytes = 16 * 1024;
    size_t max_headers = 100;
    size_t max_body_bytes = 8 * 1024 * 1024;  // buffered bodies only
  };
  enum class Result { need_more, paused, upgrade, error };

  RequestParser(RequestVisitor& visitor, Limits limits);
  RequestParser(const RequestParser&) = delete;
  RequestParser& operator=(const RequestParser&) = delete;

  // Parses as much as it can. `consumed` is how many bytes were used; the rest
  // must be fed again after resume() (paused) or belongs to the upgraded
  // protocol (upgrade).
  Result feed(const char* data, size_t len, size_t& consumed);
  void resume();
  // The peer closed its side: completes a body delimited by EOF, or reports
  // a truncated request.
  Result finish();
  const ParseError& error() const { return error_; }
  bool mid_request() const { return in_message_; }

 private:
  static int on_message_begin(llhttp_t*);
  static int on_url(llhttp_t*, const char*, size_t);
  static int on_header_field(llhttp_t*, const char*, size_t);
  static int on_header_field_complete(llhttp_t*);
  static int on_header_value(llhttp_t*, const char*, size_t);
  static int on_headers_complete(llhttp_t*);
  static int on_body_cb(llhttp_t*, const char*, size_t);
  static int on_message_complete(llhttp_t*);
  int fail(int status, std::string message);
  bool count_head(size_t n);
  int header_started();

 public:
  static constexpr size_t kHeaderOverhead = 64;

 private:

  llhttp_t parser_;
  llhttp_settings_t settings_;
  RequestVisitor& visitor_;
  Limits limits_;
  HttpRequest req_;
  std::string field_;
  bool in_field_ = false;     // a header name is being received
  bool in_trailers_ = false;  // after the head: chunked trailers are counted, never kept
  size_t header_count_ = 0;
  size_t head_bytes_ = 0;
  BodyMode body_mode_ = BodyMode::buffer;
  bool in_message_ = false;
  bool user_error_ = false;  // error_ was set by a limit, not by llhttp
  ParseError error_;
};

const char* status_reason(int status);

// Builds "HTTP/1.1 <status> <reason>\r\n<headers>\r\n". `headers` are full
// lines without CRLF ("Content-Type: x").
std::string response_head(int status, const std::vector<std::string>& headers);
std::string response_head(int status, std::string_view reason, const std::vector<std::string>& headers);

// A complete response with a body and Content-Length.
std::string simple_response(int status, std::string_view content_type, std::string_view body,
                            bool keep_alive, const std::vector<std::string>& extra_headers = {});

// Percent-decoding ('+' as space when `form` is set). Returns false on a bad escape.
bool percent_decode(std::string_view in, std::string& out, bool form);

// Query parameters in order (a name may repeat).
using QueryParams = std::vector<std::pair<std::string, std::string>>;
QueryParams parse_query(std::string_view query);
const std::string* query_value(const QueryParams& q, std::string_view name);

void append_chunk(std::string& out, std::string_view data);

// ASCII case-insensitive equality (header names and tokens, JSON keys the
// way Go's decoder matches them).
bool equals_ignoring_ascii_case(std::string_view a, std::string_view b);
// 0-15 for a hex digit, else -1.
int hex_digit_value(char c);
// Without HTTP's optional whitespace (spaces and tabs) at both ends.
std::string_view trim_ows(std::string_view s);
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";

}  // namespace execd::protocol
