// protocol/proxy: see header.
#include "protocol/proxy.h"
#include "protocol/http.h"

#include <cctype>

namespace execd::protocol {

namespace {

constexpr std::string_view kPrefix = "/proxy/";

char lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

// The tokens of every Connection header value ("close, X-Foo" → "close", "x-foo").
std::vector<std::string> connection_tokens(const std::vector<std::pair<std::string, std::string>>& headers) {
  std::vector<std::string> out;
  for (const auto& [name, value] : headers) {
    if (!equals_ignoring_ascii_case(name, "connection")) continue;
    std::string_view v = value;
    while (!v.empty()) {
      size_t comma = v.find(',');
      std::string_view token = trim_ows(v.substr(0, comma));
      if (!token.empty()) {
        std::string t;
        for (char c : token) t.push_back(lower(c));
        out.push_back(std::move(t));
      }
      if (comma == std::string_view::npos) break;
      v.remove_prefix(comma + 1);
    }
  }
  return out;
}

bool named_by(std::string_view name, const std::vector<std::string>& tokens) {
  for (const auto& t : tokens)
    if (equals_ignoring_ascii_case(name, t)) return true;
  return false;
}

// RFC 9110 7.6.1 plus the Proxy-* family and the obsolete Proxy-Connection.
bool hop_by_hop(std::string_view name) {
  static constexpr std::string_view kNames[] = {"connection", "keep-alive", "te", "trailer", "transfer-encoding",
                                                "upgrade"};
  for (auto n : kNames)
    if (equals_ignoring_ascii_case(name, n)) return true;
  return name.size() >= 6 && equals_ignoring_ascii_case(name.substr(0, 6), "proxy-");
}

}  // namespace

bool split_proxy_target(std::string_view raw_target, std::string_view& port, std::string& rest) {
  if (raw_target.substr(0, kPrefix.size()) != kPrefix) return false;
  std::string_view after = raw_target.substr(kPrefix.size());
  size_t end = after.find_first_of("/?");
  port = after.substr(0, end);
  rest.clear();
  if (end == std::string_view::npos) {
    rest = "/";
  } else {
    if (after[end] == '?') rest = "/";
    rest.append(after.substr(end));
  }
  return true;
}

int parse_proxy_port(std::string_view text) {
  if (text.empty() || text.size() > 5 || text[0] == '0') return 0;
  int v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return 0;
    v = v * 10 + (c - '0');
  }
  return v <= 65535 ? v : 0;
}

BodyFraming request_body_framing(const HttpRequest& req) {
  if (req.header("transfer-encoding")) return BodyFraming::chunked;
  const std::string* len = req.header("content-length");
  if (len && *len != "0") return BodyFraming::sized;
  return BodyFraming::none;
}

std::string canonical_header_name(std::string_view name) {
  std::string out(name);
  bool upper = true;
  for (char& c : out) {
    if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    else if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    upper = c == '-';
  }
  return out;
}

std::string_view peer_ip(std::string_view peer) {
  if (!peer.empty() && peer[0] == '[') {
    size_t close = peer.find(']');
    return close == std::string_view::npos ? peer : peer.substr(1, close - 1);
  }
  size_t colon = peer.rfind(':');
  return colon == std::string_view::npos ? peer : peer.substr(0, colon);
}

std::string upstream_request_head(const HttpRequest& req, const UpstreamRequestInfo& info) {
  const std::vector<std::string> named = connection_tokens(req.headers);
  std::string out;
  out.reserve(512);
  out += req.method;
  out += ' ';
  out += info.target;
  out += " HTTP/1.1\r\n";
  std::string forwarded_for;
  const std::string* host = nullptr;
  for (const auto& [name, value] : req.headers) {  // names are lower-case here
    if (name == "host") host = &value;
    if (name == "x-forwarded-for") {
      if (!forwarded_for.empty()) forwarded_for += ", ";
      forwarded_for += value;
      continue;
    }
    if (name == "upgrade" && req.upgrade) {
      out += "Upgrade: ";
      out += value;
      out += "\r\n";
      continue;
    }
    if (hop_by_hop(name) || named_by(name, named) || name == "x-execd-access-token" || name == "expect" ||
        name == "x-forwarded-host" || name == "x-forwarded-proto" || name == "x-forwarded-prefix" ||
        name == "content-length")
      continue;
    out += canonical_header_name(name);
    out += ": ";
    out += value;
    out += "\r\n";
  }
  if (!host) {
    out += "Host: ";
    out += info.host_fallback;
    out += "\r\n";
  }
  if (req.upgrade) out += "Connection: Upgrade\r\n";
  if (info.body == BodyFraming::chunked) {
    out += "Transfer-Encoding: chunked\r\n";
  } else if (const std::string* len = req.header("content-length")) {
    out += "Content-Length: ";
    out += *len;
    out += "\r\n";
  }
  if (!forwarded_for.empty()) forwarded_for += ", ";
  forwarded_for += info.client_ip;
  out += "X-Forwarded-For: " + forwarded_for + "\r\n";
  out += "X-Forwarded-Proto: http\r\n";
  if (host) out += "X-Forwarded-Host: " + *host + "\r\n";
  out += "X-Forwarded-Prefix: ";
  out += info.prefix;
  out += "\r\n\r\n";
  return out;
}

const std::string* HttpResponseHead::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (equals_ignoring_ascii_case(k, name)) return &v;
  return nullptr;
}

std::vector<std::string> client_response_headers(const HttpResponseHead& head) {
  const std::vector<std::string> named = connection_tokens(head.headers);
  std::vector<std::string> out;
  out.reserve(head.headers.size() + 2);
  for (const auto& [name, value] : head.headers) {
    if (head.upgrade && equals_ignoring_ascii_case(name, "upgrade")) {
      out.push_back(name + ": " + value);
      continue;
    }
    if (hop_by_hop(name) || named_by(name, named)) continue;
    out.push_back(name + ": " + value);
  }
  if (head.upgrade) out.emplace_back("Connection: Upgrade");
  return out;
}

// ---------------------------------------------------------------------------
// ResponseParser

ResponseParser::ResponseParser(ResponseVisitor& visitor) : visitor_(visitor) {
  llhttp_settings_init(&settings_);
  settings_.on_message_begin = on_message_begin;
  settings_.on_status = on_status;
  settings_.on_header_field = on_header_field;
  settings_.on_header_value = on_header_value;
  settings_.on_headers_complete = on_headers_complete;
  settings_.on_body = on_body;
  settings_.on_message_complete = on_message_complete;
  llhttp_init(&parser_, HTTP_RESPONSE, &settings_);
  parser_.data = this;
}

bool ResponseParser::count_head(size_t n) {
  head_bytes_ += n;
  return head_bytes_ <= kMaxHeadBytes;
}

int ResponseParser::on_message_begin(llhttp_t* p) {
  auto* self = static_cast<ResponseParser*>(p->data);
  self->started_ = true;
  self->head_ = HttpResponseHead{};
  self->field_done_ = false;
  self->head_bytes_ = 0;
  return 0;
}

int ResponseParser::on_status(llhttp_t* p, const char* at, size_t len) {
  auto* self = static_cast<ResponseParser*>(p->data);
  if (!self->count_head(len)) return HPE_USER;
  self->head_.reason.append(at, len);
  return 0;
}

int ResponseParser::on_header_field(llhttp_t* p, const char* at, size_t len) {
  auto* self = static_cast<ResponseParser*>(p->data);
  if (!self->count_head(len)) return HPE_USER;
  auto& headers = self->head_.headers;
  if (self->field_done_ || headers.empty()) {
    headers.emplace_back(std::string(), std::string());
    self->field_done_ = false;
  }
  headers.back().first.append(at, len);
  return 0;
}

int ResponseParser::on_header_value(llhttp_t* p, const char* at, size_t len) {
  auto* self = static_cast<ResponseParser*>(p->data);
  if (!self->count_head(len)) return HPE_USER;
  self->field_done_ = true;
  self->head_.headers.back().second.append(at, len);
  return 0;
}

int ResponseParser::on_headers_complete(llhttp_t* p) {
  auto* self = static_cast<ResponseParser*>(p->data);
  HttpResponseHead& h = self->head_;
  h.status = p->status_code;
  h.version_minor = p->http_minor;
  h.upgrade = p->upgrade != 0;
  self->upgrade_ = h.upgrade;
  if (h.status >= 100 && h.status < 200 && !h.upgrade) {
    self->interim_ = true;  // 100 Continue, 103 Early Hints: not for the client
    return 0;
  }
  self->interim_ = false;
  h.content_length = (p->flags & F_CONTENT_LENGTH) && !(p->flags & F_CHUNKED);
  h.has_body = !self->head_request_ && h.status != 204 && h.status != 304 && !h.upgrade;
  self->head_done_ = true;
  self->visitor_.on_response_head(h);
  return self->head_request_ ? 1 : 0;  // 1: no body follows, whatever the headers say
}

int ResponseParser::on_body(llhttp_t* p, const char* at, size_t len) {
  auto* self = static_cast<ResponseParser*>(p->data);
  self->visitor_.on_response_body(at, len);
  return 0;
}

int ResponseParser::on_message_complete(llhttp_t* p) {
  auto* self = static_cast<ResponseParser*>(p->data);
  if (self->interim_) {
    self->interim_ = false;
    self->started_ = false;
    return 0;
  }
  self->done_ = true;
  if (self->upgrade_) return 0;  // llhttp pauses by itself (HPE_PAUSED_UPGRADE)
  self->visitor_.on_response_complete(llhttp_should_keep_alive(p) != 0);
  return HPE_PAUSED;
}

ResponseParser::Result ResponseParser::feed(const char* data, size_t len, size_t& consumed) {
  consumed = 0;
  if (failed_) return Result::error;
  if (done_) return upgrade_ ? Result::upgrade : Result::complete;
  llhttp_errno_t err = llhttp_execute(&parser_, data, len);
  if (err == HPE_OK) {
    consumed = len;
    return Result::need_more;
  }
  const char* pos = llhttp_get_error_pos(&parser_);
  consumed = pos ? static_cast<size_t>(pos - data) : len;
  if (err == HPE_PAUSED) return Result::complete;
  if (err == HPE_PAUSED_UPGRADE) return Result::upgrade;
  failed_ = true;
  error_ = err == HPE_USER ? "response head too large" : llhttp_get_error_reason(&parser_);
  return Result::error;
}

uint64_t ResponseParser::sized_body_left() const {
  if (!head_done_ || done_ || failed_ || interim_ || !head_.has_body || !head_.content_length) return 0;
  return parser_.content_length;
}

bool ResponseParser::in_close_delimited_body() const {
  return head_done_ && !done_ && !failed_ && !interim_ && head_.has_body && !head_.content_length &&
         !(parser_.flags & F_CHUNKED);
}

ResponseParser::Result ResponseParser::finish() {
  if (done_) return Result::complete;
  if (failed_) return Result::error;
  if (!started_) {
    failed_ = true;
    error_ = "closed before a response";
    return Result::error;
  }
  llhttp_errno_t err = llhttp_finish(&parser_);
  if (done_ && (err == HPE_OK || err == HPE_PAUSED)) return Result::complete;
  failed_ = true;
  error_ = "response truncated";
  return Result::error;
}

}  // namespace execd::protocol
