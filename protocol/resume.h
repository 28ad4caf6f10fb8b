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

// Where each channel's bytes lie in an execution's combined output log
// (stdout, stderr and structured events, in the order execd took them).
// Consecutive chunks of one channel merge, so the index stays small for a
// chatty stream. Offsets are absolute: the log keeps only its newest bytes,
// and drop_before() forgets what it let go (first() and start(s) then say
// where the retained part begins).
//
// On disk the log is a run of segment files, each with an index file: a
// header (kHeaderBytes: 0xFE, then the segment's combined offset and each
// channel's offset at its start, uint64 LE) and 9-byte entries: channel
// (0-2), length (uint64 LE). An index file without a header is an old
// single-file log that starts at 0.
class OutputIndex {
 public:
  static constexpr int kChannels = 3;  // 0 stdout, 1 stderr, 2 events
  struct Segment {
    uint64_t at;         // combined offset
    uint64_t stream_at;  // offset within its channel
    uint64_t len;
    uint8_t stream;
  };
  struct Position {
    uint64_t at = 0;                    // combined offset
    uint64_t stream_at[kChannels] = {};  // each channel's offset there
  };
  static constexpr size_t kEntryBytes = 9;
  static constexpr size_t kHeaderBytes = 1 + 8 * (1 + kChannels);

  void add(uint8_t stream, uint64_t len);
  // The first retained byte (combined) and the end.
  uint64_t first() const { return first_.at; }
  uint64_t end() const { return end_; }
  // Channel `s`: its offset at first() and at end().
  uint64_t start(int s) const { return first_.stream_at[s]; }
  uint64_t stored(int s) const { return stored_[s]; }
  Position position() const;  // at end()
  const std::vector<Segment>& segments() const { return segs_; }
  // Combined offset of channel `s`'s byte `off`: first() when it lies before
  // what is retained, end() when it is not stored (yet).
  uint64_t locate(int s, uint64_t off) const;
  // Channel offsets at combined offset `at` (first() <= at <= end()).
  Position position_at(uint64_t at) const;
  // The segments overlapping [from, to), clipped to it.
  std::vector<Segment> pieces(uint64_t from, uint64_t to) const;
  // Forgets everything before combined offset `at` (<= end()).
  void drop_before(uint64_t at);
  // Forgets everything from combined offset `at` on (bytes that were never
  // stored after all: a failed write).
  void truncate(uint64_t at);

  static std::string encode_entry(uint8_t stream, uint64_t len);
  static std::string encode_header(const Position& start);
  // Appends one segment's index file to this index: its entries, stopping
  // at a torn entry or once the segment would pass `max_len` bytes (what its
  // data file holds). The first segment read sets the start. False when the
  // segment does not follow on from what is here (a missing file between).
  bool decode_segment(std::string_view bytes, uint64_t max_len);
  // One file of the old single-file format.
  static OutputIndex decode(std::string_view bytes, uint64_t max_end);

 private:
  std::vector<Segment> segs_;  // a deque would allocate ~600 bytes even empty, per kept log
  Position first_;
  uint64_t end_ = 0;
  uint64_t stored_[kChannels] = {};
  bool started_ = false;  // decode_segment: a start was read
};

// Where a resumed reader of one channel starts: at `requested` if retained,
// else at the first retained byte after it (a gap).
struct ResumeStart {
  uint64_t from = 0;
  bool gap = false;
};
// Bytes [first, stored) of the channel are retained; `total` were produced.
// Bytes before `first` were let go (the log keeps the newest), bytes in
// [stored, total) were never stored (a failing disk); a request there
// resumes live at `total`.
ResumeStart plan_resume(uint64_t requested, uint64_t first, uint64_t stored, uint64_t total);

}  // namespace execd::protocol
