// protocol/connect: see header.
#include "protocol/connect.h"

#include "protocol/json_text.h"

namespace execd::protocol::connect {

namespace {

struct CodeInfo {
  Code code;
  std::string_view name;
  int status;
};

// The protocol's table (connectrpc.com/docs/protocol, "Error Codes").
constexpr CodeInfo kCodes[] = {
    {Code::ok, "ok", 200},
    {Code::canceled, "canceled", 499},
    {Code::unknown, "unknown", 500},
    {Code::invalid_argument, "invalid_argument", 400},
    {Code::deadline_exceeded, "deadline_exceeded", 504},
    {Code::not_found, "not_found", 404},
    {Code::already_exists, "already_exists", 409},
    {Code::permission_denied, "permission_denied", 403},
    {Code::resource_exhausted, "resource_exhausted", 429},
    {Code::failed_precondition, "failed_precondition", 400},
    {Code::aborted, "aborted", 409},
    {Code::out_of_range, "out_of_range", 400},
    {Code::unimplemented, "unimplemented", 501},
    {Code::internal, "internal", 500},
    {Code::unavailable, "unavailable", 503},
    {Code::data_loss, "data_loss", 500},
    {Code::unauthenticated, "unauthenticated", 401},
};

// Messages are the client's text as much as ours (paths, user names): written
// lossily so that a stray invalid byte cannot make the JSON invalid.
void append_error_object(std::string& out, const Error& e) {
  out += "{\"code\":\"";
  out += code_name(e.code);
  out += "\",\"message\":";
  append_json_string_lossy(out, e.message);
  out += '}';
}

}  // namespace

std::string_view code_name(Code code) {
  for (const auto& c : kCodes)
    if (c.code == code) return c.name;
  return "unknown";
}

std::optional<Code> code_from_name(std::string_view name) {
  for (const auto& c : kCodes)
    if (c.name == name) return c.code;
  return std::nullopt;
}

int http_status(Code code) {
  for (const auto& c : kCodes)
    if (c.code == code) return c.status;
  return 500;
}

std::string error_json(const Error& error) {
  std::string out;
  append_error_object(out, error);
  return out;
}

void append_envelope(std::string& out, uint8_t flags, std::string_view payload) {
  size_t at = begin_envelope(out, flags);
  out.append(payload);
  finish_envelope(out, at);
}

size_t begin_envelope(std::string& out, uint8_t flags) {
  size_t at = out.size();
  out.push_back(static_cast<char>(flags));
  out.append(4, '\0');
  return at;
}

void finish_envelope(std::string& out, size_t header_at) {
  uint64_t len = out.size() - header_at - kEnvelopeHeader;
  for (int i = 0; i < 4; ++i) out[header_at + 1 + i] = static_cast<char>((len >> (8 * (3 - i))) & 0xff);
}

void append_end_stream(std::string& out, const Error* error, const Metadata& metadata) {
  size_t at = begin_envelope(out, kFlagEndStream);
  out += '{';
  bool first = true;
  if (error && error->code != Code::ok) {
    out += "\"error\":";
    append_error_object(out, *error);
    first = false;
  }
  if (!metadata.empty()) {
    if (!first) out += ',';
    out += "\"metadata\":{";
    for (size_t i = 0; i < metadata.size(); ++i) {
      if (i) out += ',';
      append_json_string_lossy(out, metadata[i].first);
      out += ":[";
      append_json_string_lossy(out, metadata[i].second);
      out += ']';
    }
    out += '}';
  }
  out += '}';
  finish_envelope(out, at);
}

bool EnvelopeReader::feed(std::string_view data, const OnMessage& on_message) {
  for (;;) {
    if (failed() || stopped_) return false;
    if (!header_done_) {
      if (data.empty()) return true;
      size_t take = std::min(data.size(), kEnvelopeHeader - buf_.size());
      buf_.append(data.substr(0, take));
      data.remove_prefix(take);
      if (buf_.size() < kEnvelopeHeader) return true;
      flags_ = static_cast<uint8_t>(buf_[0]);
      want_ = 0;
      for (int i = 1; i < 5; ++i) want_ = (want_ << 8) | static_cast<uint8_t>(buf_[i]);
      buf_.clear();
      if (flags_ & kFlagCompressed) {
        error_ = "compressed message, but no compression was negotiated";
        return false;
      }
      if (flags_ & ~(kFlagCompressed | kFlagEndStream)) {
        error_ = "unknown envelope flags " + std::to_string(flags_);
        return false;
      }
      if (want_ > max_) {
        error_ = "message of " + std::to_string(want_) + " bytes is larger than the limit of " +
                 std::to_string(max_);
        return false;
      }
      header_done_ = true;
    }
    // A whole message in this piece goes to the callback without a copy.
    std::string_view payload;
    if (buf_.empty() && data.size() >= want_) {
      payload = data.substr(0, want_);
      data.remove_prefix(want_);
    } else {
      if (data.empty()) return true;
      size_t take = std::min<size_t>(data.size(), want_ - buf_.size());
      buf_.append(data.substr(0, take));
      data.remove_prefix(take);
      if (buf_.size() < want_) return true;
      payload = buf_;
    }
    header_done_ = false;
    bool go_on = on_message(Message{flags_, payload});
    buf_.clear();
    if (!go_on) {
      stopped_ = true;
      return false;
    }
  }
}

bool EnvelopeReader::finish() {
  if (failed()) return false;
  if (header_done_ || !buf_.empty()) {
    error_ = "the body ended inside a message";
    return false;
  }
  return true;
}

BodyKind body_kind(std::string_view content_type) {
  std::string_view type = content_type.substr(0, content_type.find(';'));
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.remove_suffix(1);
  while (!type.empty() && (type.front() == ' ' || type.front() == '\t')) type.remove_prefix(1);
  auto lower_equal = [](std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      char c = a[i];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (c != b[i]) return false;
    }
    return true;
  };
  if (lower_equal(type, "application/json")) return BodyKind::unary_json;
  if (lower_equal(type, "application/connect+json")) return BodyKind::stream_json;
  return BodyKind::unsupported;
}

std::optional<uint64_t> parse_timeout_ms(std::string_view value) {
  if (value.empty() || value.size() > 10) return std::nullopt;
  uint64_t v = 0;
  for (char c : value) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

}  // namespace execd::protocol::connect
