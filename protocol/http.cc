// protocol/http: see header.
#include "protocol/http.h"

#include <cctype>
#include <cstring>

namespace execd::protocol {

const std::string* HttpRequest::header(std::string_view lower_name) const {
  for (const auto& [k, v] : headers)
    if (k == lower_name) return &v;
  return nullptr;
}

RequestParser::RequestParser(RequestVisitor& visitor, Limits limits) : visitor_(visitor), limits_(limits) {
  llhttp_settings_init(&settings_);
  settings_.on_message_begin = on_message_begin;
  settings_.on_url = on_url;
  settings_.on_header_field = on_header_field;
  settings_.on_header_field_complete = on_header_field_complete;
  settings_.on_header_value = on_header_value;
  settings_.on_headers_complete = on_headers_complete;
  settings_.on_body = on_body_cb;
  settings_.on_message_complete = on_message_complete;
  llhttp_init(&parser_, HTTP_REQUEST, &settings_);
  parser_.data = this;
}

int RequestParser::fail(int status, std::string message) {
  user_error_ = true;
  error_.status = status;
  error_.message = std::move(message);
  return HPE_USER;
}

bool RequestParser::count_head(size_t n) {
  head_bytes_ += n;
  return head_bytes_ <= limits_.max_head_bytes;
}

int RequestParser::on_message_begin(llhttp_t* p) {
  auto* self = static_cast<RequestParser*>(p->data);
  self->req_ = HttpRequest{};
  self->field_.clear();
  self->head_bytes_ = 0;
  self->header_count_ = 0;
  self->in_field_ = false;
  self->in_trailers_ = false;
  self->body_mode_ = BodyMode::buffer;
  self->in_message_ = true;
  return 0;
}

int RequestParser::on_url(llhttp_t* p, const char* at, size_t len) {
  auto* self = static_cast<RequestParser*>(p->data);
  if (!self->count_head(len)) return self->fail(431, "request header fields too large");
  self->req_.target.append(at, len);
  return 0;
}

int RequestParser::header_started() {
  if (++header_count_ > limits_.max_headers) return fail(431, "too many request header fields");
  if (!count_head(kHeaderOverhead)) return fail(431, "request header fields too large");
  return 0;
}

int RequestParser::on_header_field(llhttp_t* p, const char* at, size_t len) {
  auto* self = static_cast<RequestParser*>(p->data);
  if (!self->count_head(len)) return self->fail(431, "request header fields too large");
  if (!self->in_field_) {  // llhttp may deliver one name in several pieces
    if (int rc = self->header_started()) return rc;
    self->in_field_ = true;
    self->field_.clear();
  }
  if (self->in_trailers_) return 0;
  for (size_t i = 0; i < len; ++i) self->field_.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(at[i]))));
  return 0;
}

int RequestParser::on_header_field_complete(llhttp_t* p) {
  auto* self = static_cast<RequestParser*>(p->data);
  self->in_field_ = false;
  // A chunked-body trailer must never stand in for a header (the token above
  // all): the head was routed and authorized before the body began.
  if (!self->in_trailers_) self->req_.headers.emplace_back(std::move(self->field_), std::string());
  return 0;
}

int RequestParser::on_header_value(llhttp_t* p, const char* at, size_t len) {
  auto* self = static_cast<RequestParser*>(p->data);
  if (!self->count_head(len)) return self->fail(431, "request header fields too large");
  if (!self->in_trailers_ && !self->req_.headers.empty()) self->req_.headers.back().second.append(at, len);
  return 0;
}

int RequestParser::on_headers_complete(llhttp_t* p) {
  auto* self = static_cast<RequestParser*>(p->data);
  HttpRequest& req = self->req_;
  req.method = llhttp_method_name(static_cast<llhttp_method_t>(p->method));
  req.keep_alive = llhttp_should_keep_alive(p) != 0;
  req.upgrade = p->upgrade != 0;
  req.version_minor = p->http_major == 1 ? p->http_minor : 0;
  self->in_trailers_ = true;
  self->in_field_ = false;
  std::string_view target = req.target;
  size_t q = target.find('?');
  std::string_view raw_path = target.substr(0, q);
  if (q != std::string_view::npos) req.query.assign(target.substr(q + 1));
  if (raw_path.empty() || raw_path[0] != '/') return self->fail(400, "request target must be an absolute path");
  if (!percent_decode(raw_path, req.path, false)) return self->fail(400, "bad percent-encoding in path");
  if (req.path.find('\0') != std::string::npos) return self->fail(400, "NUL byte in path");
  self->body_mode_ = self->visitor_.on_request_head(req);
  if (self->body_mode_ == BodyMode::buffer && (p->flags & F_CONTENT_LENGTH) &&
      p->content_length > self->limits_.max_body_bytes)
    return self->fail(413, "request body exceeds " + std::to_string(self->limits_.max_body_bytes) + " bytes");
  return 0;
}

int RequestParser::on_body_cb(llhttp_t* p, const char* at, size_t len) {
  auto* self = static_cast<RequestParser*>(p->data);
  if (self->body_mode_ == BodyMode::stream) {
    self->visitor_.on_body(at, len);
    return 0;
  }
  if (self->req_.body.size() + len > self->limits_.max_body_bytes)
    return self->fail(413, "request body exceeds " + std::to_string(self->limits_.max_body_bytes) + " bytes");
  self->req_.body.append(at, len);
  return 0;
}

int RequestParser::on_message_complete(llhttp_t* p) {
  auto* self = static_cast<RequestParser*>(p->data);
  self->in_message_ = false;
  self->visitor_.on_request(self->req_);
  // An upgrade stops llhttp by itself (HPE_PAUSED_UPGRADE).
  return self->req_.upgrade ? 0 : HPE_PAUSED;
}

RequestParser::Result RequestParser::feed(const char* data, size_t len, size_t& consumed) {
  consumed = 0;
  llhttp_errno_t err = llhttp_execute(&parser_, data, len);
  if (err == HPE_OK) {
    consumed = len;
    return Result::need_more;
  }
  const char* pos = llhttp_get_error_pos(&parser_);
  if (err == HPE_PAUSED) {
    consumed = pos ? static_cast<size_t>(pos - data) : len;
    return Result::paused;
  }
  if (err == HPE_PAUSED_UPGRADE) {
    consumed = pos ? static_cast<size_t>(pos - data) : len;
    return Result::upgrade;
  }
  if (!user_error_) {
    error_.status = 400;
    error_.message = std::string("malformed HTTP request: ") + llhttp_get_error_reason(&parser_);
  }
  return Result::error;
}

void RequestParser::resume() { llhttp_resume(&parser_); }

RequestParser::Result RequestParser::finish() {
  llhttp_errno_t err = llhttp_finish(&parser_);
  if (err == HPE_OK) return Result::need_more;
  if (err == HPE_PAUSED) return Result::paused;
  if (!user_error_) {
    error_.status = 400;
    error_.message = "truncated HTTP request";
  }
  return Result::error;
}

const char* status_reason(int status) {
  switch (status) {
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 416: return "Range Not Satisfiable";
    case 426: return "Upgrade Required";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 507: return "Insufficient Storage";
    default: return "Unknown";
  }
}

std::string response_head(int status, const std::vector<std::string>& headers) {
  return response_head(status, status_reason(status), headers);
}

std::string response_head(int status, std::string_view reason, const std::vector<std::string>& headers) {
  std::string out = "HTTP/1.1 ";
  out += std::to_string(status);
  out += ' ';
  out += reason;
  out += "\r\n";
  for (const auto& h : headers) {
    out += h;
    out += "\r\n";
  }
  out += "\r\n";
  return out;
}

std::string simple_response(int status, std::string_view content_type, std::string_view body, bool keep_alive,
                            const std::vector<std::string>& extra_headers) {
  std::vector<std::string> headers;
  if (!content_type.empty()) headers.push_back("Content-Type: " + std::string(content_type));
  headers.push_back("Content-Length: " + std::to_string(body.size()));
  if (!keep_alive) headers.emplace_back("Connection: close");
  for (const auto& h : extra_headers) headers.push_back(h);
  std::string out = response_head(status, headers);
  out.append(body);
  return out;
}

int hex_digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool percent_decode(std::string_view in, std::string& out, bool form) {
  out.clear();
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) return false;
      int hi = hex_digit_value(in[i + 1]), lo = hex_digit_value(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && form) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return true;
}

QueryParams parse_query(std::string_view query) {
  QueryParams params;
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    size_t eq = pair.find('=');
    std::string name, value;
    if (!percent_decode(pair.substr(0, eq), name, true)) name.assign(pair.substr(0, eq));
    if (eq != std::string_view::npos && !percent_decode(pair.substr(eq + 1), value, true))
      value.assign(pair.substr(eq + 1));
    params.emplace_back(std::move(name), std::move(value));
  }
  return params;
}

const std::string* query_value(const QueryParams& q, std::string_view name) {
  for (const auto& [k, v] : q)
    if (k == name) return &v;
  return nullptr;
}

bool equals_ignoring_ascii_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

void append_chunk(std::string& out, std::string_view data) {
  if (data.empty()) return;
  char buf[20];
  int n = snprintf(buf, sizeof buf, "%zx\r\n", data.size());
  out.append(buf, static_cast<size_t>(n));
  out.append(data);
  out += "\r\n";
}

}  // namespace execd::protocol
