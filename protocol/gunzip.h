// protocol/gunzip.h — decoding a gzip-encoded request body (Content-Encoding:
// gzip, RFC 1952) as it arrives, with zlib's streaming inflate.
//
// * Pulled, not pushed: each inflate() fills at most the caller's buffer and
//   keeps the rest inside zlib, so the caller decides how much decompressed
//   data exists at a time (one 64 KiB read of a bomb is ~64 MiB inflated;
//   it is never made at once).
// * Bounded: a stream that would decode to more than `max_output` bytes fails
//   (too_large()) before a byte past the bound is handed out.
// * Concatenated members are decoded one after the other, as gzip(1) does and
//   RFC 1952 2.2 describes (a gzip file is a series of members), and as Go's
//   gzip.Reader (what envd decodes uploads with) does by default. Anything
//   after a member that is not another member is corrupt (Go: the same).
// * complete(): the input stopped exactly at the end of a member. An empty
//   body, or one cut inside a member, is not a gzip stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

struct z_stream_s;  // zlib's, kept out of this header

namespace execd::protocol {

enum class ContentCoding { identity, gzip, unsupported };

// A request's Content-Encoding (nullptr: absent). "gzip" and its alias
// "x-gzip" (RFC 9110 8.4.1.3), case-insensitive; "" and "identity" are
// identity; anything else, lists of codings included, is unsupported.
ContentCoding content_coding(const std::string* header);

class Gunzip {
 public:
  struct Step {
    size_t consumed = 0;  // input bytes taken
    size_t produced = 0;  // bytes written to `out`
  };

  explicit Gunzip(uint64_t max_output);
  ~Gunzip();
  Gunzip(const Gunzip&) = delete;
  Gunzip& operator=(const Gunzip&) = delete;

  // Inflates from `in` into `out` until `in` is used up, `out` (of `room`
  // bytes) is full, or the stream fails. Output may remain inside zlib with
  // all input consumed: call again (with empty input, too) while produced ==
  // room. After a failure nothing is produced and the Step's output is void.
  Step inflate(std::string_view in, char* out, size_t room);

  bool failed() const { return !error_.empty(); }
  bool too_large() const { return too_large_; }
  const std::string& error() const { return error_; }
  bool complete() const { return !failed() && members_ > 0 && between_members_; }

 private:
  void fail(std::string why);

  std::unique_ptr<z_stream_s> z_;
  bool initialised_ = false;
  bool between_members_ = false;  // the last member ended; the next has not begun
  bool too_large_ = false;
  uint64_t members_ = 0;
  uint64_t total_out_ = 0;
  uint64_t max_output_;
  std::string error_;
};

}  // namespace execd::protocol
