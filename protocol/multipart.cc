// protocol/multipart.cc — the multipart/form-data state machine.
//
// Delimiter detection relies on one property: the delimiter "\r\n--boundary"
// contains '\r' only at its first byte (boundaries cannot contain CR). So when
// a partial match fails, none of the held bytes can start another delimiter:
// they are all data, and only the current byte needs re-scanning. Data between
// '\r' bytes is found with memchr and passed through without copying.
//
// Like Go's mime/multipart, "\r\n--boundary" counts as a delimiter only when
// followed by "--" (closing) or optional spaces/tabs then CRLF; otherwise the
// bytes are part data.
#include "protocol/multipart.h"
#include "protocol/http.h"

#include <algorithm>
#include <cstring>

namespace execd::protocol {
namespace {

constexpr size_t kMaxDelimiterPadding = 256;
constexpr size_t kMaxBoundaryLength = 200;

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// RFC 5987 ext-value: charset'language'percent-encoded. Returns nullopt when
// it is not in that form. Bytes are returned as decoded (UTF-8 expected).
std::optional<std::string> decode_ext_value(std::string_view value) {
  size_t first = value.find('\'');
  if (first == std::string_view::npos) return std::nullopt;
  size_t second = value.find('\'', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  std::string_view encoded = value.substr(second + 1);
  std::string out;
  for (size_t i = 0; i < encoded.size(); ++i) {
    if (encoded[i] == '%') {
      int hi = i + 1 < encoded.size() ? hex_digit_value(encoded[i + 1]) : -1;
      int lo = i + 2 < encoded.size() ? hex_digit_value(encoded[i + 2]) : -1;
      if (hi < 0 || lo < 0) return std::nullopt;
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else {
      out.push_back(encoded[i]);
    }
  }
  return out;
}

}  // namespace

const std::string* HeaderValue::param(std::string_view name) const {
  for (const auto& [key, param_value] : params) {
    if (key == name) return &param_value;
  }
  return nullptr;
}

HeaderValue parse_header_value(std::string_view header) {
  HeaderValue out;
  size_t semi = header.find(';');
  out.value = to_lower(trim_ows(header.substr(0, semi)));
  size_t i = semi == std::string_view::npos ? header.size() : semi + 1;
  while (i < header.size()) {
    while (i < header.size() && (header[i] == ' ' || header[i] == '\t' || header[i] == ';')) ++i;
    if (i >= header.size()) break;
    size_t name_end = i;
    while (name_end < header.size() && header[name_end] != '=' && header[name_end] != ';') ++name_end;
    std::string name = to_lower(trim_ows(header.substr(i, name_end - i)));
    if (name_end >= header.size() || header[name_end] == ';') {
      i = name_end;  // parameter without a value: ignored
      continue;
    }
    i = name_end + 1;
    while (i < header.size() && (header[i] == ' ' || header[i] == '\t')) ++i;
    std::string value;
    if (i < header.size() && header[i] == '"') {
      ++i;
      while (i < header.size() && header[i] != '"') {
        // Backslash escapes only '"' and '\\'; elsewhere it is kept, so
        // Windows paths sent unescaped by some browsers survive (as in Go).
        if (header[i] == '\\' && i + 1 < header.size() &&
            (header[i + 1] == '"' || header[i + 1] == '\\')) {
          ++i;
        }
        value.push_back(header[i]);
        ++i;
      }
      if (i < header.size()) ++i;  // closing quote
      while (i < header.size() && header[i] != ';') ++i;
    } else {
      size_t end = header.find(';', i);
      if (end == std::string_view::npos) end = header.size();
      value = std::string(trim_ows(header.substr(i, end - i)));
      i = end;
    }
    if (!name.empty() && !out.param(name)) out.params.emplace_back(std::move(name), std::move(value));
  }
  return out;
}

BoundaryResult boundary_from_content_type(std::string_view content_type) {
  HeaderValue parsed = parse_header_value(content_type);
  if (!parsed.value.starts_with("multipart/")) {
    return {std::nullopt, "content type is not multipart: " + std::string(content_type)};
  }
  const std::string* boundary = parsed.param("boundary");
  if (!boundary) return {std::nullopt, "multipart content type has no boundary parameter"};
  if (boundary->empty() || boundary->size() > kMaxBoundaryLength) {
    return {std::nullopt, "multipart boundary must be 1-200 characters"};
  }
  if (boundary->find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos) {
    return {std::nullopt, "multipart boundary contains CR, LF or NUL"};
  }
  return {*boundary, {}};
}

MultipartParser::MultipartParser(std::string boundary, MultipartCallbacks callbacks,
                                 size_t max_header_bytes)
    : delimiter_("\r\n--" + boundary),
      callbacks_(std::move(callbacks)),
      max_header_bytes_(max_header_bytes) {
  // The first delimiter may open the body without a preceding CRLF: pretend
  // that CRLF was already seen.
  held_ = "\r\n";
  matched_ = 2;
}

void MultipartParser::fail(MultipartError error, std::string message) {
  if (error_ != MultipartError::none) return;
  error_ = error;
  error_message_ = std::move(message);
}

void MultipartParser::emit_data(const char* data, size_t size) {
  if (size == 0) return;
  if (state_ == State::part_body) {
    if (callbacks_.on_part_data) callbacks_.on_part_data(std::string_view(data, size));
    return;
  }
  // Preamble bytes are discarded, but a long preamble means the boundary is
  // wrong or the body is not multipart at all.
  preamble_bytes_ += size;
  if (preamble_bytes_ > kMaxPreambleBytes) {
    fail(MultipartError::no_boundary_found,
         "multipart boundary not found (wrong boundary or not a multipart body)");
  }
}

void MultipartParser::abandon_delimiter_match() {
  std::string held;
  held.swap(held_);
  matched_ = 0;
  trailer_ = Trailer::none;
  emit_data(held.data(), held.size());
}

void MultipartParser::delimiter_complete(bool closing) {
  held_.clear();
  matched_ = 0;
  trailer_ = Trailer::none;
  if (state_ == State::part_body && callbacks_.on_part_end) callbacks_.on_part_end();
  if (closing) {
    state_ = State::epilogue;
  } else {
    state_ = State::part_headers;
    header_block_.clear();
  }
}

bool MultipartParser::consume_header_byte(char c) {
  header_block_.push_back(c);
  if (header_block_.size() > max_header_bytes_) {
    fail(MultipartError::header_too_large,
         "multipart part headers exceed " + std::to_string(max_header_bytes_) + " bytes");
    return false;
  }
  if (c != '\n') return true;
  if (header_block_ == "\r\n" || header_block_.ends_with("\r\n\r\n")) return parse_headers();
  return true;
}

bool MultipartParser::parse_headers() {
  PartHeaders headers;
  std::string_view block(header_block_);
  size_t i = 0;
  while (i < block.size()) {
    size_t end = block.find("\r\n", i);
    if (end == std::string_view::npos) end = block.size();
    std::string_view line = block.substr(i, end - i);
    i = end + 2;
    if (line.empty()) continue;
    if ((line.front() == ' ' || line.front() == '\t') && !headers.raw.empty()) {
      // Obsolete line folding: continue the previous value.
      headers.raw.back().second += ' ';
      headers.raw.back().second += trim_ows(line);
      continue;
    }
    size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      fail(MultipartError::malformed_header, "malformed multipart header line");
      return false;
    }
    headers.raw.emplace_back(std::string(trim_ows(line.substr(0, colon))),
                             std::string(trim_ows(line.substr(colon + 1))));
  }
  for (const auto& [name, value] : headers.raw) {
    if (equals_ignoring_ascii_case(name, "content-disposition")) {
      HeaderValue disposition = parse_header_value(value);
      if (const std::string* field = disposition.param("name")) headers.name = *field;
      if (const std::string* file = disposition.param("filename")) headers.filename = *file;
      if (const std::string* ext = disposition.param("filename*")) {
        if (auto decoded = decode_ext_value(*ext)) headers.filename = std::move(*decoded);
      }
    } else if (equals_ignoring_ascii_case(name, "content-type")) {
      headers.content_type = value;
    }
  }
  header_block_.clear();
  header_block_.shrink_to_fit();
  state_ = State::part_body;
  if (callbacks_.on_part_begin) callbacks_.on_part_begin(headers);
  return true;
}

bool MultipartParser::feed(const char* data, size_t size) {
  size_t i = 0;
  while (i < size && !failed()) {
    switch (state_) {
      case State::epilogue:
        return true;

      case State::part_headers:
        consume_header_byte(data[i]);
        ++i;
        break;

      case State::preamble:
      case State::part_body: {
        const char c = data[i];
        switch (trailer_) {
          case Trailer::none:
            break;
          case Trailer::start:
            if (c == '-') {
              trailer_ = Trailer::dash;
            } else if (c == ' ' || c == '\t') {
              trailer_ = Trailer::padding;
            } else if (c == '\r') {
              trailer_ = Trailer::cr;
            } else {
              abandon_delimiter_match();
              continue;
            }
            held_.push_back(c);
            ++i;
            continue;
          case Trailer::dash:
            if (c != '-') {
              abandon_delimiter_match();
              continue;
            }
            ++i;
            delimiter_complete(/*closing=*/true);
            continue;
          case Trailer::padding:
            if ((c == ' ' || c == '\t') && held_.size() < delimiter_.size() + kMaxDelimiterPadding) {
              held_.push_back(c);
            } else if (c == '\r') {
              held_.push_back(c);
              trailer_ = Trailer::cr;
            } else {
              abandon_delimiter_match();
              continue;
            }
            ++i;
            continue;
          case Trailer::cr:
            if (c != '\n') {
              abandon_delimiter_match();
              continue;
            }
            ++i;
            delimiter_complete(/*closing=*/false);
            continue;
        }

        if (matched_ == 0) {
          const void* cr = std::memchr(data + i, '\r', size - i);
          size_t end = cr ? static_cast<size_t>(static_cast<const char*>(cr) - data) : size;
          emit_data(data + i, end - i);
          if (!cr) {
            i = size;
            break;
          }
          held_.assign(1, '\r');
          matched_ = 1;
          i = end + 1;
        } else if (c == delimiter_[matched_]) {
          held_.push_back(c);
          ++i;
          if (++matched_ == delimiter_.size()) trailer_ = Trailer::start;
        } else {
          abandon_delimiter_match();  // re-scan `c`
        }
        break;
      }
    }
  }
  return !failed();
}

bool MultipartParser::finish() {
  if (failed()) return false;
  if (state_ != State::epilogue) {
    fail(state_ == State::preamble ? MultipartError::no_boundary_found : MultipartError::truncated,
         state_ == State::preamble ? "multipart body contains no boundary"
                                   : "multipart body truncated: closing boundary missing");
    return false;
  }
  return true;
}

}  // namespace execd::protocol
