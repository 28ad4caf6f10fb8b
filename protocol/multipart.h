// protocol/multipart.h — streaming (push) multipart/form-data parser.
//
// Bytes are fed in arbitrary pieces; part data is delivered as it arrives and
// is never accumulated, so memory is bounded by the boundary length plus the
// header limit. Callbacks are plain std::functions; backpressure is the
// caller's job (stop feeding / pause the socket). Callbacks must not call
// feed() or finish() re-entrantly.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace execd::protocol {

struct PartHeaders {
  // Content-Disposition parameters. `filename` prefers RFC 2231/5987
  // `filename*=UTF-8''...` over plain `filename=` when both are present.
  std::string name;
  std::optional<std::string> filename;
  std::string content_type;  // raw header value, "" if absent
  // Every header line as received (names as sent, values trimmed).
  std::vector<std::pair<std::string, std::string>> raw;
};

enum class MultipartError {
  none,
  no_boundary_found,  // wrong boundary or garbage: no delimiter within the preamble limit
  header_too_large,   // a part's header block exceeds the limit
  malformed_header,   // header line without ':' or bad delimiter padding
  truncated,          // finish() before the closing delimiter
};

struct MultipartCallbacks {
  std::function<void(const PartHeaders&)> on_part_begin;
  std::function<void(std::string_view chunk)> on_part_data;  // never empty
  std::function<void()> on_part_end;
};

class MultipartParser {
 public:
  static constexpr size_t kDefaultMaxHeaderBytes = 16 * 1024;
  static constexpr size_t kMaxPreambleBytes = 16 * 1024;

  // `boundary` without the leading "--" (as in the Content-Type parameter);
  // it must be valid (see boundary_from_content_type).
  MultipartParser(std::string boundary, MultipartCallbacks callbacks,
                  size_t max_header_bytes = kDefaultMaxHeaderBytes);

  // Returns false once the parser has failed (then error() says why); further
  // calls are ignored. Bytes after the closing delimiter (epilogue) are ignored.
  bool feed(const char* data, size_t size);
  bool feed(std::string_view data) { return feed(data.data(), data.size()); }

  // Call at end of body. Fails with `truncated` unless the closing delimiter
  // was seen (an open part gets no on_part_end).
  bool finish();

  bool complete() const { return state_ == State::epilogue; }
  bool failed() const { return error_ != MultipartError::none; }
  MultipartError error() const { return error_; }
  const std::string& error_message() const { return error_message_; }

 private:
  enum class State { preamble, part_headers, part_body, epilogue };
  // Progress through "\r\n--boundary" and what may follow it.
  enum class Trailer { none, start, dash, padding, cr };

  void fail(MultipartError error, std::string message);
  void emit_data(const char* data, size_t size);
  void abandon_delimiter_match();  // held bytes turned out to be data
  void delimiter_complete(bool closing);
  bool consume_header_byte(char c);
  bool parse_headers();

  std::string delimiter_;  // "\r\n--" + boundary
  MultipartCallbacks callbacks_;
  size_t max_header_bytes_;

  State state_ = State::preamble;
  size_t matched_ = 0;          // bytes of delimiter_ matched (held back)
  Trailer trailer_ = Trailer::none;
  std::string held_;            // bytes held back while a delimiter might be forming
  size_t preamble_bytes_ = 0;
  std::string header_block_;
  MultipartError error_ = MultipartError::none;
  std::string error_message_;
};

// Extracts the boundary from a Content-Type value such as
// `multipart/form-data; charset=utf-8; boundary="abc def"`. Requires a
// multipart/* media type and a boundary of 1-200 characters without CR, LF or
// NUL (RFC 2046 says 70; real clients stay within that).
struct BoundaryResult {
  std::optional<std::string> boundary;
  std::string error;  // set when boundary is nullopt
};
BoundaryResult boundary_from_content_type(std::string_view content_type);

// Parses `value; key=token; key="quoted \" string"` into the lower-cased main
// value and lower-cased parameter names. Exposed for tests and for the
// handler's Content-Disposition needs.
struct HeaderValue {
  std::string value;
  std::vector<std::pair<std::string, std::string>> params;
  const std::string* param(std::string_view name) const;
};
HeaderValue parse_header_value(std::string_view header);

}  // namespace execd::protocol
