// execd/api/commands: the /command API. A CommandRecord is one execution,
// owned by the registry from spawn until its retention expires (and nothing
// reads or writes its files). It fans the process's output out to its
// retained log (with a per-stream index beside it), to at most one original
// stream (linked to it: the stream may go at any time, the command keeps
// running and its output stays readable) and to any number of resume
// readers (GET /command/{id}/stream, or a repeated start with the same id),
// which replay from the log and then follow live, each at its own pace.
//
// Records persist in the state dir at start and at finish, appended to one
// log (records.log, entries as protocol/command_record encodes them), so a
// restarted execd reloads them; one that was still running is reported lost
// and its process group is ended.
#pragma once

#include <uv.h>

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "execd/api/execution_stream.h"
#include "execd/api/output_log.h"
#include "execd/context.h"
#include "protocol/command_record.h"
#include "protocol/envelope.h"
#include "protocol/errors.h"
#include "protocol/resume.h"
#include "pty/command.h"
#include "pty/pty_session.h"

namespace execd::api {

class CommandRegistry;
class ResumeReader;
class StdinBody;

class CommandRecord final : public pty::CommandSink, public ExecutionProducer {
 public:
  explicit CommandRecord(CommandRegistry& r) : registry(r) {}
  ~CommandRecord() override;

  // pty::CommandSink
  void on_output(pty::Stream s, const uint8_t* data, size_t len) override;
  void on_finished(const pty::Outcome& outcome) override;
  // ExecutionProducer
  void set_client_paused(bool paused) override;
  void client_gone() override;

  void update_pause();
  // Finished, failed to start, or lost: the result below is final.
  bool done() const { return outcome.has_value() || final_result != nullptr; }
  bool starting() const { return !done() && !cmd && !reloaded && !external; }
  protocol::ExecutionResult result() const;
  uint64_t result_bytes(int s) const;
  std::string status_json() const;
  protocol::StoredCommand stored() const;
  // Resume readers holding the command back (their output is past the log).
  void hold(int delta);
  bool in_use() const;

  CommandRegistry& registry;
  std::string id, content, fingerprint, cwd;
  std::optional<uint32_t> uid, gid;
  bool background = false, tty = false, stdin_open = false;
  bool reloaded = false, lost = false;
  bool in_finished_order = false;  // queued for the sweep (once)
  bool external = false;  // a bash session run: output and outcome come from the session
  int64_t started_ns = 0, finished_ns = 0;
  pty::Command* cmd = nullptr;  // released when the command finishes
  // The command's cgroup, while it exists: the containment keeps it while
  // what the command left behind runs, so that DELETE /command still
  // reaches it, and lets it go once removed. Not owned here: a retained
  // record holding it kept two heap pieces per command after a burst.
  std::weak_ptr<pty::CommandCgroup> cgroup;
  bool contained = false;  // it ran in a cgroup (false in process-group mode)
  std::optional<pty::Outcome> outcome;
  // Reloaded, or never started (rare: held apart, 240 bytes a record otherwise).
  std::unique_ptr<protocol::ExecutionResult> final_result;
  std::string start_error;
  std::unique_ptr<OutputLog> log, index_log;
  protocol::OutputIndex index;
  uint64_t produced[2] = {0, 0};
  bool client_paused = false;
  int holds = 0;
  std::set<ResumeReader*> readers;
  // Persistence: waiting in the registry's queue, or in a batch being
  // written; `dirty` asks for another write after that one.
  bool persist_queued = false, persisting = false, dirty = false;
  int64_t pgid = 0;
  // The boot the command ran in: this one (no copy of its id: a string made
  // for every command pinned heap pages after a burst), or a reloaded
  // record's other one.
  bool this_boot = false;
  std::string other_boot_id;
  uint64_t start_ticks = 0;
  // stdin (POST /command/{id}/stdin)
  pty::FdWriter* stdin_writer = nullptr;
  uint64_t stdin_accepted = 0;
  bool stdin_eof = false;
  StdinBody* stdin_body = nullptr;  // the write in progress
};

class CommandRegistry {
 public:
  explicit CommandRegistry(Context& ctx);
  ~CommandRegistry();
  Context& ctx() { return ctx_; }

  // `id` empty: a fresh random one.
  CommandRecord* create(std::string id, std::string content, bool background);
  // A record whose output and outcome someone else delivers (a bash session
  // run): on_output(), then finish_external().
  CommandRecord* create_external(std::string id, std::string content);
  void finish_external(CommandRecord* r, const pty::Outcome& outcome);
  CommandRecord* find(const std::string& id);
  void finished(CommandRecord* r);
  // A reserved record whose start was refused before it ran: forgotten.
  void discard(CommandRecord* r, const protocol::ApiError& why);
  void persist(CommandRecord* r);
  size_t running() const { return running_; }
  // Shutdown: every running command's process group gets `sig`.
  void signal_all(int sig);
  // Stops the retention timer and releases every command (daemon exit).
  void close();

 private:
  static constexpr size_t kPersistBatch = 32;
  static constexpr uint64_t kPersistDelayMs = 20;
  void schedule_batch();
  void write_next_batch();
  void load();
  void sweep();
  void remove_files(const std::string& id);
  void journal_finished(CommandRecord* r);
  static void on_sweep(uv_timer_t* t) { static_cast<CommandRegistry*>(t->data)->sweep(); }
  Context& ctx_;
  uint64_t sweep_period_ = 1000;
  std::map<std::string, std::unique_ptr<CommandRecord>> records_;
  // Finished records, oldest first, for the sweep: pointers, not id copies
  // (a copy made at every command's end pinned a heap page of its own after
  // a burst). Only the sweep erases a finished record, from the front.
  std::deque<CommandRecord*> finished_order_;
  std::deque<std::string> persist_queue_;  // ids waiting for a record write
  bool batch_in_flight_ = false;
  // The records log: used by one batch job at a time, never by the loop.
  int log_fd_ = -1;
  uint64_t log_size_ = 0;
  size_t log_entries_ = 0;
  size_t running_ = 0;
  uv_timer_t sweep_timer_, persist_timer_;
  bool closed_ = false;
};

}  // namespace execd::api
