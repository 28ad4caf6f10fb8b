// protocol/resume: the pure arithmetic of resumable executions: client-chosen
// ids, byte offsets in query strings, the per-stream index of a command's
// combined output log, and which bytes of a retried stdin write are new.
// No I/O; unit-tested in tests/unit/test_resume.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace execd::protocol {

// A client-chosen command id: [A-Za-z0-9._-]{1,128}.
bool valid_client_id(std::string_view id);

// A non-negative base-10 offset ("0", "123"); nullopt for anything else
// (sign, spaces, overflow, empty).
std::optional<uint64_t> parse_offset(std::string_view raw);

// A retried stdin write that starts at `offset` (the client's idea of how
// many bytes were accepted before it) against `accepted` bytes so far.
struct StdinWritePlan {
  bool gap = false;   // offset > accepted: bytes in between were never sent (409)
  uint64_t skip = 0;  // leading body bytes that were already accepted
};
StdinWritePlan plan_stdin_write(uint64_t accepted, std::optional<uint64_t> offset);

// Where each stream's bytes lie in a command's combined output log (stdout
// and stderr in the order execd read them). Consecutive chunks of the same
// stream merge, so the index stays small for a chatty stream. On disk, an
// index is a sequence of 9-byte entries: stream (0/1), length (uint64 LE).
class OutputIndex {
 public:
  struct Segment {
    uint64_t at;         // combined offset
    uint64_t stream_at;  // offset within its stream
    uint64_t len;
    uint8_t stream;
  };
  static constexpr size_t kEntryBytes = 9;

  void add(uint8_t stream, uint64_t len);
  uint64_t end() const { return end_; }
  uint64_t stored(int s) const { return stored_[s]; }
  const std::vector<Segment>& segments() const { return segs_; }
  // Combined offset of stream `s`'s byte `off`; end() when it is not stored.
  uint64_t locate(int s, uint64_t off) const;
  // The segments overlapping [from, to), clipped to it.
  std::vector<Segment> pieces(uint64_t from, uint64_t to) const;

  static std::string encode_entry(uint8_t stream, uint64_t len);
  // Rebuilds an index from its file, stopping at a torn entry or once the
  // combined length would pass `max_end` (the bytes the log file holds).
  static OutputIndex decode(std::string_view bytes, uint64_t max_end);

 private:
  std::vector<Segment> segs_;
  std::vector<size_t> by_stream_[2];  // positions in segs_, per stream
  uint64_t end_ = 0;
  uint64_t stored_[2] = {0, 0};
};

// Where a resumed reader of one stream starts: at `requested` if retained,
// else at the first retained byte after it (a gap).
struct ResumeStart {
  uint64_t from = 0;
  bool gap = false;
};
// `stored` bytes of the stream are in the log (from 0); `total` were produced.
// Bytes in [stored, total) are gone; a request there resumes live at `total`.
ResumeStart plan_resume(uint64_t requested, uint64_t stored, uint64_t total);

}  // namespace execd::protocol
