// protocol/envelope: turns process output and outcomes into stream events, in
// the two framings execd speaks.
//
//  compat: what the OpenSandbox SDKs parse today: one compact JSON object per
//          line followed by a blank line. stdout/stderr are split into lines by
//          the Go daemon's rules; invalid UTF-8 becomes U+FFFD.
//  exact:  NDJSON. Each output event carries `text` (valid UTF-8, never a split
//          character) or `b64` (bytes that are not valid UTF-8) and `offset`,
//          so concatenating decoded chunks reproduces the bytes exactly.
//
// The encoder owns only per-stream carry state; it appends complete event
// lines to a caller-owned string and never touches sockets.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace execd::protocol {

enum class Framing { compat, exact };
struct ChangeSummary;  // protocol/changes
enum class OutputStream : uint8_t { out = 0, err = 1 };

// What a finished execution proves about itself (the terminal event's payload).
struct ExecutionResult {
  std::optional<int> exit_code;  // empty when a signal killed it or it never started
  std::string signal;            // "SIGKILL" etc., empty if none
  std::string signal_text;       // "killed": Go's wording, for the compat traceback
  std::string start_error;       // non-empty if the process could not be started
  bool timed_out = false;
  bool interrupted = false;
  int64_t execution_time_ms = 0;
  uint64_t stdout_bytes = 0;
  uint64_t stderr_bytes = 0;
  std::string stdout_sha256;
  std::string stderr_sha256;
  int64_t user_cpu_ms = 0;
  int64_t system_cpu_ms = 0;
  int64_t max_rss_kib = 0;
  // Processes of the command still running when its stream ended (its shell
  // exited and left them); -1 if unknown.
  int leftover_processes = 0;
  bool oom_killed = false;      // the cgroup's memory limit made the kernel kill a process
  bool pids_limit_hit = false;  // a fork failed at the cgroup's pids limit
  // Code runs: the kernel's status ("ok", "error", "aborted", "interrupted",
  // "died", "start_failed", "output_overflow") and execution count. A
  // non-empty status makes the terminal event the code run's
  // execution_complete (in both framings, as /code always answered).
  std::string status;
  std::optional<int64_t> execution_count;
  // track_changes: what changed under the roots while it ran (null: not asked for).
  std::shared_ptr<const ChangeSummary> changes;
};

class EventEncoder {
 public:
  // A compat line longer than this is emitted in pieces (cut on a UTF-8
  // boundary) instead of being held in memory without bound as Go does.
  static constexpr size_t kMaxCompatLine = 64 * 1024;

  explicit EventEncoder(Framing framing) : framing_(framing) {}

  Framing framing() const { return framing_; }
  // compat framing only: false emits each output chunk as one event, as it
  // came (kernel stream messages), instead of one event per line.
  void set_split_lines(bool split) { split_lines_ = split; }
  const char* content_type() const {
    return framing_ == Framing::exact ? "application/x-ndjson" : "text/event-stream";
  }

  void init(std::string& out, std::string_view id, int64_t ts_ms) const;
  // A resumed stream: the next output of `s` is at byte `offset` (exact framing).
  void start_at(OutputStream s, uint64_t offset) { streams_[static_cast<int>(s)].offset = offset; }
  // {"type":"gap","stream":...,"requested":N,"available_from":M}: bytes
  // [requested, available_from) of a stream are no longer retained.
  void gap(std::string& out, OutputStream s, uint64_t requested, uint64_t available_from, int64_t ts_ms);
  void ping(std::string& out, int64_t ts_ms) const;
  void output(std::string& out, OutputStream s, const uint8_t* data, size_t len, int64_t ts_ms);
  // Emits whatever a stream still holds back (partial line, UTF-8 tail).
  void flush(std::string& out, OutputStream s, int64_t ts_ms);
  void terminal(std::string& out, const ExecutionResult& r, int64_t ts_ms) const;
  // A background start's whole stream after init: {"type":"execution_complete","timestamp":...}.
  void background_ack(std::string& out, int64_t ts_ms) const;
  // A non-terminal error after the stream started (compat: an `error` event).
  void error(std::string& out, std::string_view ename, std::string_view evalue, int64_t ts_ms) const;
  // Any other event: a compact JSON object, terminated for the framing.
  void event(std::string& out, std::string_view json_object) const;

 private:
  struct StreamState {
    std::string pending;  // compat: partial line; exact: incomplete UTF-8 tail
    bool last_was_cr = false;
    uint64_t offset = 0;  // exact: bytes emitted so far
  };

  void compat_line(std::string& out, OutputStream s, std::string_view line, int64_t ts_ms) const;
  void compat_event(std::string& out, OutputStream s, std::string_view line, int64_t ts_ms) const;
  void exact_chunk(std::string& out, OutputStream s, const uint8_t* data, size_t len, int64_t ts_ms);
  void exact_event(std::string& out, OutputStream s, const uint8_t* data, size_t len, bool text, int64_t ts_ms);
  void end_event(std::string& out) const;

  Framing framing_;
  bool split_lines_ = true;
  StreamState streams_[2];
};

const char* stream_name(OutputStream s);

}  // namespace execd::protocol
