// execd/exec/execution: one run of anything execd runs for a client (a
// command, a bash session run, code in a kernel), from the moment its id is
// reserved until its retention expires. Every kind of run plugs in through
// one small interface, the Runner; everything a run produces is the
// Execution's:
//
//  * the retained output (exec/output_log: stdout, stderr and structured
//    events, newest bytes kept) and what proves it (byte counts, SHA-256);
//  * every HTTP stream of it (exec/reader: the original response, retried
//    starts, resume readers), each pulled at its own pace, and the one
//    decision of when the runner must pause: while a reader that must not
//    lose bytes is behind (the original stream of a pausable run, or any
//    reader the log would otherwise have to let go of), or the disk is
//    behind. A run that cannot pause (a kernel) is never waited for: its
//    readers catch up from the log, and an original stream the log cannot
//    keep up for ends with a structured OutputOverflow;
//  * stdin (exec/stdin): the offset accepted so far, EOF, the one write in
//    progress;
//  * the outcome: the terminal event (protocol/envelope builds it from the
//    ExecutionResult), the status document, the record that survives a
//    restart (exec/record_store) and the journal entry, each built here once
//    for every kind of run.
//
// A Runner knows nothing of HTTP, records or the journal: it starts,
// reports bytes (output), events (event) and its end (finish), takes stdin,
// pauses, and stops when asked. Adding a kind of run means writing one.
//
// Ownership: the registry (exec/registry) owns every Execution; the
// Execution owns its runner and its log. Readers and a stdin write are
// Sources of their exchanges and reach the Execution through Links; pool
// jobs that point at it pin it (in_use()), and the registry never frees a
// pinned one. Loop thread only.
#pragma once

#include <uv.h>

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "execd/exec/track_changes.h"
#include "execd/exec/output_log.h"
#include "execd/link.h"
#include "protocol/execution_record.h"
#include "protocol/envelope.h"
#include "protocol/errors.h"
#include "pty/digest.h"

namespace execd::exec {

class Execution;
class ExecutionReader;
class StdinBody;
class Registry;

// The kinds of run, as the journal and the records name them. A process is
// one started through E2B's envd API (api/envd/process, envd/process_start): a command given as
// argv rather than a shell line, perhaps on a PTY.
enum class Kind : uint8_t { command, session_run, code_run, process, isolated_run };
// How many kinds there are (arrays indexed by kind are this long).
inline constexpr size_t kKindCount = static_cast<size_t>(Kind::isolated_run) + 1;
// What differs between kinds, in one row each (execution.cc's table): a
// new kind is a row here, a RunStart and a route, not a branch in the model.
struct KindTraits {
  const char* name;          // in records, the journal and status documents
  const char* owner_field;   // what status calls spec.owner: "session", "context"
  const char* content_field; // what the summary calls spec.content: "command", "code"
  const char* noun;          // "the <noun> has finished" to a late stdin write
  bool split_lines;          // compat framing splits output into lines (a kernel's chunks are its own)
  bool status_result;        // ends with a status (ok, error, start_failed) instead of leftover counts
};
const KindTraits& kind_traits(Kind k);
const char* kind_name(Kind k);
std::optional<Kind> kind_from_name(std::string_view name);

// Output channels of the retained log.
enum Channel : uint8_t { kStdout = 0, kStderr = 1, kEvents = 2 };

// What a runner calls while it runs (the Execution).
class RunSink {
 public:
  virtual ~RunSink() = default;
  virtual void output(Channel c, const uint8_t* data, size_t len) = 0;
  // Where the next output may be read into so that output() need not copy
  // it into the log (none: anywhere).
  virtual std::span<uint8_t> output_room(Channel c) { return {}; }
  // A structured event (a compact JSON object): kernel results and errors.
  virtual void event(std::string_view json_object) = 0;
  // The last call: how it ended. Byte counts and digests are the sink's.
  virtual void finish(protocol::ExecutionResult result) = 0;
  // stdin: everything queued was taken; the process closed its stdin.
  virtual void stdin_drained() = 0;
  virtual void stdin_closed(int err) = 0;
};

// Whom a client's signal reaches (Runner::send_signal).
enum class SignalScope : uint8_t { leader, everything };

// A kind of run.
class Runner {
 public:
  virtual ~Runner() = default;
  // A process writing to a pipe can be paused; a kernel's iopub cannot (a
  // kernel drops what its publishing queue cannot hold).
  virtual bool pausable() const = 0;
  virtual void set_paused(bool paused) {}
  // DELETE: stops the run, or what it left running. False if nothing runs.
  virtual bool interrupt() = 0;
  // Daemon shutdown: TERM to what runs, later KILL.
  virtual void signal(int sig) {}
  // No stream wants the rest of the output (the original client left and
  // nobody else reads): a kernel run stops then; a process runs on.
  virtual void unwatched() {}
  // Status fields of what still runs (processes_running).
  virtual void describe(nlohmann::ordered_json& status) const {}
  // stdin, for runs started with it open.
  virtual bool has_stdin() const { return false; }
  virtual void stdin_write(const char* data, size_t len) {}
  virtual size_t stdin_queued() const { return 0; }
  // EOF: a pipe closes once drained; a terminal gets ^D and stays.
  virtual void stdin_close() {}
  // The pid whose process group a restarted execd ends if the run was lost.
  virtual int64_t pgid() const { return 0; }
  // A client's signal (E2B's SendSignal). everything: `sig` to all the run
  // started (its cgroup or keeper tree, and its process group), even after
  // its leader exited; leader: to the leader alone, while it runs (envd's
  // default). False when nothing it would reach runs any more.
  virtual bool send_signal(int sig, SignalScope scope) { return false; }
  // The terminal's size, for runs on a PTY.
  virtual void resize(uint16_t rows, uint16_t cols) {}
  // After the run finished: nothing of it is left to signal, interrupt or
  // describe, so the execution may go cold (exec/cold_records) without it.
  virtual bool holds_nothing() const { return false; }
  // Whether describe() counts processes_running (a cold one says 0 then).
  virtual bool counts_processes() const { return false; }
};

// What a new execution is.
struct ExecutionSpec {
  Kind kind = Kind::command;
  std::string id;          // empty: a fresh random one
  std::string content;     // the command or the code (an argv command: its display form)
  std::vector<std::string> argv;  // an argv command
  std::string fingerprint; // of the start request (retried starts attach)
  std::string cwd;
  std::optional<uint32_t> uid, gid;
  bool background = false, tty = false, stdin_open = false;
  std::string owner;       // the session or code context it ran in
  std::string language;    // code runs
  std::vector<std::string> track_changes;  // roots whose changes the result lists
};

class Execution final : public RunSink {
 public:
  Execution(Registry& registry, ExecutionSpec spec, uint64_t log_limit);
  // Reloaded from its record (exec/record_store).
  Execution(Registry& registry, const protocol::StoredExecution& stored, std::unique_ptr<OutputLog> log);
  ~Execution() override;
  Execution(const Execution&) = delete;
  Execution& operator=(const Execution&) = delete;

  // --- the run ---------------------------------------------------------
  // track_changes: from now on changes under the tracker's roots count for
  // this run; at its end the result lists them. Call before the runner
  // starts anything.
  void track(std::unique_ptr<ChangeTracker> tracker);
  // The runner has started it.
  void start(std::unique_ptr<Runner> runner);
  bool was_started() const { return started_; }
  // It could not start: the result is final (a 200 stream with init, then
  // the error, for the original reader).
  void fail_start(const std::string& error);
  // Reserved but refused before it ran (a client that left, shutdown):
  // every waiting reader gets `why`; the registry forgets it.
  void discard(const protocol::ApiError& why);
  bool starting() const { return state_ == State::reserved; }
  bool running() const { return state_ == State::running; }
  bool done() const { return state_ >= State::finished; }
  bool lost() const { return state_ == State::lost; }
  bool reloaded() const { return reloaded_; }
  // DELETE /command.
  bool interrupt() { return runner_ && runner_->interrupt(); }
  void signal(int sig) {
    if (runner_ && running()) runner_->signal(sig);
  }
  // A client's signal to the run's leader or to everything it started
  // (Runner::send_signal).
  bool send_signal(int sig, SignalScope scope) { return runner_ && runner_->send_signal(sig, scope); }
  void resize(uint16_t rows, uint16_t cols) {
    if (runner_ && running()) runner_->resize(rows, cols);
  }
  // Daemon exit: lets go of the runner (its process is left to be reaped).
  void close() { runner_.reset(); }

  // RunSink
  void output(Channel c, const uint8_t* data, size_t len) override;
  std::span<uint8_t> output_room(Channel c) override;
  void event(std::string_view json_object) override;
  void finish(protocol::ExecutionResult result) override;
  void stdin_drained() override;
  void stdin_closed(int err) override;

  // --- what it is and how it went --------------------------------------
  const std::string& id() const { return spec_.id; }
  const ExecutionSpec& spec() const { return spec_; }
  // The spec while the run is only reserved (exec/launch fills in what
  // its preparation found); nothing has been recorded of it yet.
  ExecutionSpec& reserved_spec() { return spec_; }
  Kind kind() const { return spec_.kind; }
  bool pausable() const { return !runner_ || runner_->pausable(); }
  // The state budget may let go of this running run's output before `upto`:
  // not while a reader of a pausable run still needs it (the run waits for
  // that reader instead); any other reader gets a gap.
  bool budget_may_shed(uint64_t upto);
  // Bytes produced per channel (stored or not).
  uint64_t produced(int channel) const { return produced_[channel]; }
  // The result so far (final once done()).
  protocol::ExecutionResult result() const;
  std::string status_json() const;
  // One entry of GET /command: what it is and how it stands, its command or
  // code only if asked (`with_content`).
  nlohmann::ordered_json summary_json(bool with_content) const;
  protocol::StoredExecution stored() const;
  nlohmann::ordered_json journal_entry() const;
  int64_t started_ns() const { return started_ns_; }
  int64_t finished_ns() const { return finished_ns_; }
  Registry& registry() { return registry_; }
  const OutputLog* log() const { return log_.get(); }
  OutputLog* log() { return log_.get(); }

  // --- readers (exec/reader) -------------------------------------------
  void attach(ExecutionReader& r, Link<Execution>& reader_end);
  // A reader fell behind, caught up, or moved on: re-decide pausing, and
  // let the log drop what nobody needs any more.
  void readers_changed();

  // --- stdin (exec/stdin) ----------------------------------------------
  bool stdin_open() const { return spec_.stdin_open; }
  uint64_t stdin_accepted() const { return stdin_accepted_; }
  bool stdin_eof() const { return stdin_eof_; }
  // Whether a write can go to the process now (open, not at EOF).
  bool stdin_writable() const { return runner_ && runner_->has_stdin() && !stdin_eof_ && running(); }
  bool stdin_busy() const { return static_cast<bool>(stdin_body_); }
  void attach_stdin(StdinBody& body, Link<Execution>& body_end);
  // Queues bytes for the process; false when the write ended (closed).
  void stdin_write(const char* data, size_t len);
  size_t stdin_queued() const { return runner_ ? runner_->stdin_queued() : 0; }
  void stdin_close();

  // --- for the registry and the record store ---------------------------
  // Pool work or a record write points at it: not to be freed.
  bool in_use() const;
  struct PersistState {
    bool queued = false, writing = false, dirty = false;
  };
  PersistState& persist_state() { return persist_; }
  // Finished, and nothing (a reader, a write, a runner with processes left)
  // needs this object any more: the registry may keep it cold instead.
  bool may_go_cold() const;
  // What a cold record keeps besides the stored record, and gives back.
  static constexpr uint8_t kColdReloaded = 1, kColdCountsProcesses = 2;
  uint8_t cold_flags() const;
  void set_cold_flags(uint8_t flags);
  // Set by the record store once the first record write has read it.
  void set_start_ticks(uint64_t ticks) {
    if (!start_ticks_) start_ticks_ = ticks;
  }

 private:
  enum class State : uint8_t { reserved, running, finished, lost };
  friend class ExecutionReader;
  template <class Fn>
  void each_reader(Fn fn);
  void update_pause();
  bool may_drop(uint64_t upto);
  void end_readers();
  void finish_now(protocol::ExecutionResult r);

  Registry& registry_;
  ExecutionSpec spec_;
  State state_ = State::reserved;
  bool reloaded_ = false;
  bool started_ = false;
  bool counts_processes_ = false;  // warmed from cold: processes_running 0
  std::unique_ptr<Runner> runner_;
  std::unique_ptr<ChangeTracker> tracker_;
  bool settling_ = false;  // finished, waiting for the tracker's list
  std::unique_ptr<OutputLog> log_;
  std::list<Link<ExecutionReader>> readers_;
  pty::OutputDigest digest_[2];
  uint64_t produced_[3] = {0, 0, 0};
  int64_t started_ns_ = 0, finished_ns_ = 0;
  bool paused_ = false;
  bool watched_ = false;  // an original stream was attached and may still be
  // Final once done(): what the runner reported plus counts and digests, or
  // what the record said.
  std::unique_ptr<protocol::ExecutionResult> result_;
  std::string last_error_;  // start error of a run that never ran
  // stdin
  Link<StdinBody> stdin_body_;
  uint64_t stdin_accepted_ = 0;
  bool stdin_eof_ = false;
  // persistence
  PersistState persist_;
  int64_t pgid_ = 0;
  uint64_t start_ticks_ = 0;
  std::string other_boot_id_;  // a reloaded record of another boot
};

// Fills `signal` ("SIGKILL") and `signal_text` ("killed").
void set_signal(protocol::ExecutionResult& r, int signal);

}  // namespace execd::exec
