// execd/exec/execution: see header.
#include "execd/exec/execution.h"

#include "execd/journal/entries.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <iterator>

#include "execd/clock.h"
#include "execd/exec/reader.h"
#include "execd/exec/registry.h"
#include "execd/exec/stdin.h"
#include "protocol/sha.h"
#include "pty/command.h"

namespace execd::exec {

namespace {
// One row per Kind, in the enum's order.
constexpr KindTraits kKinds[] = {
    {"command", "session", "command", "command", true, false},
    {"session_run", "session", "command", "execution", true, false},
    {"code_run", "context", "code", "execution", false, true},
    {"process", "session", "command", "command", true, false},
    {"isolated_run", "session", "command", "execution", true, false},
};
static_assert(std::size(kKinds) == kKindCount, "one row per Kind");
}  // namespace

const KindTraits& kind_traits(Kind k) {
  size_t i = static_cast<size_t>(k);
  return kKinds[i < kKindCount ? i : 0];
}

const char* kind_name(Kind k) { return kind_traits(k).name; }

std::optional<Kind> kind_from_name(std::string_view name) {
  for (size_t i = 0; i < kKindCount; ++i)
    if (name == kKinds[i].name) return static_cast<Kind>(i);
  return std::nullopt;
}

void set_signal(protocol::ExecutionResult& r, int signal) {
  if (!signal) return;
  r.signal = pty::signal_name(signal);
  r.signal_text = pty::signal_description(signal);
}

Execution::Execution(Registry& registry, ExecutionSpec spec, uint64_t log_limit)
    : registry_(registry), spec_(std::move(spec)) {
  started_ns_ = unix_ns();
  log_ = std::make_unique<OutputLog>(registry_.loop(), registry_.state_dir() + "/" + spec_.id, log_limit,
                                     &registry_.write_delay());
  log_->set_on_written([this] { update_pause(); });
  log_->set_drop_guard([this](uint64_t upto) { return may_drop(upto); });
  log_->set_budget(&registry_.budget());
}

Execution::Execution(Registry& registry, const protocol::StoredExecution& stored, std::unique_ptr<OutputLog> log)
    : registry_(registry), reloaded_(true), log_(std::move(log)) {
  spec_.kind = kind_from_name(stored.kind).value_or(Kind::command);
  spec_.id = stored.id;
  spec_.content = stored.content;
  spec_.argv = stored.argv;
  spec_.fingerprint = stored.fingerprint;
  spec_.cwd = stored.cwd;
  spec_.uid = stored.uid;
  spec_.gid = stored.gid;
  spec_.background = stored.background;
  spec_.tty = stored.tty;
  spec_.stdin_open = stored.stdin_open;
  spec_.owner = stored.owner;
  spec_.language = stored.language;
  stdin_accepted_ = stored.stdin_accepted;
  stdin_eof_ = true;
  started_ns_ = stored.started_ns;
  finished_ns_ = stored.finished_ns;
  pgid_ = stored.pgid;
  start_ticks_ = stored.start_ticks;
  if (stored.boot_id != registry_.boot_id()) other_boot_id_ = stored.boot_id;
  state_ = stored.lost ? State::lost : State::finished;
  result_ = std::make_unique<protocol::ExecutionResult>(stored.result);
  produced_[0] = stored.result.stdout_bytes;
  produced_[1] = stored.result.stderr_bytes;
  produced_[2] = log_ ? log_->index().stored(kEvents) : 0;
}

Execution::~Execution() = default;

// ---------------------------------------------------------------------------
// The run

void Execution::track(std::unique_ptr<ChangeTracker> tracker) {
  tracker_ = std::move(tracker);
  if (tracker_) tracker_->begin(spec_.id);
}

void Execution::start(std::unique_ptr<Runner> runner) {
  runner_ = std::move(runner);
  state_ = State::running;
  started_ = true;
  registry_.started(*this);
  pgid_ = runner_->pgid();
  registry_.records().persist(*this);
  each_reader([](ExecutionReader& r) { r.begin(); });
}

void Execution::fail_start(const std::string& error) {
  spdlog::warn("{} {} failed to start: {}", kind_name(spec_.kind), spec_.id, error);
  last_error_ = error;
  protocol::ExecutionResult r;
  r.start_error = error;
  if (kind_traits(spec_.kind).status_result) r.status = "start_failed";
  finish(std::move(r));
}

void Execution::discard(const protocol::ApiError& why) {
  each_reader([&](ExecutionReader& r) { r.reject(why); });
  if (log_) log_->remove();
  registry_.forget(*this);  // frees this
}

template <class Fn>
void Execution::each_reader(Fn fn) {
  for (auto it = readers_.begin(); it != readers_.end();) {
    if (ExecutionReader* r = it->get()) {
      fn(*r);
      ++it;
    } else {
      it = readers_.erase(it);
    }
  }
}

void Execution::attach(ExecutionReader& r, Link<Execution>& reader_end) {
  if (r.original()) watched_ = true;
  readers_.emplace_back();
  link(*this, readers_.back(), r, reader_end);
}

void Execution::output(Channel c, const uint8_t* data, size_t len) {
  if (len == 0 || done() || settling_) return;
  if (c != kEvents) registry_.activity().note_output(unix_ms());
  uint64_t at = produced_[c];
  produced_[c] += len;
  if (c != kEvents) digest_[c].update(data, len);
  uint64_t stored = 0;
  if (log_) {
    uint64_t before = log_->end();
    log_->append(c, data, len);
    stored = log_->end() - before;
  }
  for (auto& l : readers_)
    if (ExecutionReader* r = l.get()) r->on_output(c, at, data, len, stored);
  if (log_ && (log_->over_budget() || log_->over_limit() || paused_)) update_pause();
}

std::span<uint8_t> Execution::output_room(Channel c) {
  if (!log_ || c == kEvents || done() || settling_) return {};
  return log_->room();
}

void Execution::event(std::string_view json_object) {
  std::string line;
  line.reserve(json_object.size() + 1);
  line.append(json_object);
  line += '\n';
  output(kEvents, reinterpret_cast<const uint8_t*>(line.data()), line.size());
}

void Execution::finish(protocol::ExecutionResult r) {
  if (done() || settling_) return;
  if (tracker_) {
    // The list of changes first: every record the kernel queued while it
    // ran becomes an event, then each path's final state is looked at.
    settling_ = true;
    tracker_->finish([this, r = std::move(r)](std::shared_ptr<const protocol::ChangeSummary> changes) mutable {
      r.changes = std::move(changes);
      tracker_.reset();
      finish_now(std::move(r));
    });
    return;
  }
  finish_now(std::move(r));
}

void Execution::finish_now(protocol::ExecutionResult r) {
  settling_ = false;
  r.stdout_bytes = produced_[0];
  r.stderr_bytes = produced_[1];
  r.stdout_sha256 = protocol::lower_hex(digest_[0].finish());
  r.stderr_sha256 = protocol::lower_hex(digest_[1].finish());
  result_ = std::make_unique<protocol::ExecutionResult>(std::move(r));
  state_ = State::finished;
  finished_ns_ = unix_ns();
  // No more output: the log's files close once written.
  if (log_) log_->seal();
  if (stdin_body_) stdin_body_->fail(409, protocol::codes::kRuntimeError,
                                     std::string("the ") + kind_traits(spec_.kind).noun +
                                         " has finished");
  each_reader([](ExecutionReader& r) { r.on_finished(); });
  registry_.records().persist(*this);
  registry_.journal_append(journal_entry());
  paused_ = false;
  registry_.finished(*this);
}

// ---------------------------------------------------------------------------
// Readers and pausing

void Execution::readers_changed() {
  if (log_ && log_->over_limit()) log_->trim();
  update_pause();
  // The original stream is gone and nobody else reads: a kernel run stops
  // (its context becomes free again); a process runs on, its output kept.
  if (!running() || !runner_ || !watched_) return;
  for (auto& l : readers_)
    if (ExecutionReader* r = l.get(); r && !r->ended()) return;
  watched_ = false;
  runner_->unwatched();
}

void Execution::update_pause() {
  if (!runner_ || !running()) return;
  bool pause = false;
  for (auto& l : readers_)
    if (ExecutionReader* r = l.get(); r && r->holding()) pause = true;
  if (log_ && (log_->over_budget() || log_->over_limit())) pause = true;
  if (pause == paused_) return;
  paused_ = pause;
  runner_->set_paused(pause);
}

bool Execution::budget_may_shed(uint64_t upto) {
  if (!pausable()) return true;
  bool ok = true;
  each_reader([&](ExecutionReader& r) { ok = ok && !r.needs(upto); });
  return ok;
}

bool Execution::may_drop(uint64_t upto) {
  bool ok = true;
  bool overflowed = false;
  each_reader([&](ExecutionReader& r) {
    if (!r.needs(upto)) return;
    if (pausable()) {
      ok = false;  // hold the run instead: the reader catches up first
    } else if (r.original()) {
      r.overflow("more than " + std::to_string(log_->limit()) + " bytes of output waited for the client");
      overflowed = true;
    }
  });
  if (overflowed && runner_ && running()) runner_->interrupt();
  return ok;
}

// ---------------------------------------------------------------------------
// stdin

void Execution::attach_stdin(StdinBody& body, Link<Execution>& body_end) { link(*this, stdin_body_, body, body_end); }

void Execution::stdin_write(const char* data, size_t len) {
  if (!stdin_writable()) return;
  registry_.activity().note_input(unix_ms());
  stdin_accepted_ += len;
  runner_->stdin_write(data, len);
}

void Execution::stdin_close() {
  if (stdin_eof_) return;
  stdin_eof_ = true;
  if (runner_ && running()) runner_->stdin_close();
}

void Execution::stdin_drained() {
  if (StdinBody* b = stdin_body_.get()) b->drained();
}

void Execution::stdin_closed(int err) {
  spdlog::info("{} {}: stdin closed by the process ({})", kind_name(spec_.kind), spec_.id, strerror(err));
  stdin_eof_ = true;
  if (StdinBody* b = stdin_body_.get()) b->fail(409, protocol::codes::kRuntimeError, "the command closed its stdin");
}

// ---------------------------------------------------------------------------
// What it says about itself

bool Execution::in_use() const {
  bool readers = false;
  for (auto& l : readers_) readers = readers || static_cast<bool>(l);
  return readers || persist_.queued || persist_.writing || stdin_body_ || (log_ && (log_->busy() || !log_->settled()));
}

bool Execution::may_go_cold() const {
  // The runner's check last: it may read the cgroup's population.
  return done() && !settling_ && log_ && !in_use() && (!runner_ || runner_->holds_nothing());
}

uint8_t Execution::cold_flags() const {
  uint8_t f = 0;
  if (reloaded_) f |= kColdReloaded;
  if (counts_processes_ || (runner_ && runner_->counts_processes())) f |= kColdCountsProcesses;
  return f;
}

void Execution::set_cold_flags(uint8_t flags) {
  reloaded_ = flags & kColdReloaded;
  counts_processes_ = flags & kColdCountsProcesses;
}

protocol::ExecutionResult Execution::result() const {
  if (result_) return *result_;
  protocol::ExecutionResult r;
  r.stdout_bytes = produced_[0];
  r.stderr_bytes = produced_[1];
  return r;
}

std::string Execution::status_json() const {
  nlohmann::ordered_json j;
  j["id"] = spec_.id;
  j["content"] = spec_.content;
  if (!spec_.argv.empty()) j["argv"] = spec_.argv;
  bool running_now = !done();
  j["running"] = running_now;
  protocol::ExecutionResult r = result();
  if (lost()) {
    // Honest: execd went away while it ran; how it ended is unknown.
    j["lost"] = true;
    j["error"] = "lost: execd stopped while the command was running";
  } else if (!running_now) {
    if (!r.start_error.empty()) {
      j["exit_code"] = 255;
      j["error"] = r.start_error;
    } else if (r.exit_code) {
      j["exit_code"] = *r.exit_code;
      if (*r.exit_code != 0) j["error"] = "exit status " + std::to_string(*r.exit_code);
    } else if (!r.status.empty()) {
      // A code run: the kernel's word for how it went.
      j["exit_code"] = r.status == "ok" ? 0 : 1;
      if (r.status != "ok") j["error"] = r.status;
    } else {
      j["exit_code"] = -1;
      j["error"] = "signal: " + r.signal_text;
    }
  }
  j["started_at"] = rfc3339_nano(started_ns_);
  if (finished_ns_) j["finished_at"] = rfc3339_nano(finished_ns_);
  // Beyond the Go daemon: what ran, and the structured result once finished.
  if (spec_.kind != Kind::command) j["kind"] = kind_name(spec_.kind);
  if (!spec_.owner.empty()) j[kind_traits(spec_.kind).owner_field] = spec_.owner;
  j["background"] = spec_.background;
  if (done() && r.start_error.empty() && !lost()) {
    j["signal"] = r.signal.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(r.signal);
    j["timed_out"] = r.timed_out;
    j["interrupted"] = r.interrupted;
    j["execution_time"] = r.execution_time_ms;
    j["stdout_bytes"] = r.stdout_bytes;
    j["stderr_bytes"] = r.stderr_bytes;
    j["stdout_sha256"] = r.stdout_sha256;
    j["stderr_sha256"] = r.stderr_sha256;
    if (!r.status.empty()) {
      j["status"] = r.status;
      if (r.execution_count) j["execution_count"] = *r.execution_count;
    } else {
      j["leftover_processes"] = r.leftover_processes;
    }
    if (runner_) runner_->describe(j);
    else if (counts_processes_) j["processes_running"] = 0;
    if (r.oom_killed) j["oom_killed"] = true;
    if (r.pids_limit_hit) j["pids_limit_hit"] = true;
    if (r.changes) j["changes"] = protocol::changes_json(*r.changes);
  } else if (lost()) {
    j["stdout_bytes"] = r.stdout_bytes;
    j["stderr_bytes"] = r.stderr_bytes;
  }
  if (spec_.stdin_open) j["stdin_offset"] = stdin_accepted_;
  if (reloaded_) j["reloaded"] = true;
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

nlohmann::ordered_json Execution::summary_json(bool with_content) const {
  nlohmann::ordered_json j;
  j["id"] = spec_.id;
  j["kind"] = kind_name(spec_.kind);
  j["running"] = !done();
  if (!spec_.owner.empty()) j[kind_traits(spec_.kind).owner_field] = spec_.owner;
  j["background"] = spec_.background;
  j["started_at"] = rfc3339_nano(started_ns_);
  if (finished_ns_) j["finished_at"] = rfc3339_nano(finished_ns_);
  if (lost()) {
    j["lost"] = true;
  } else if (done()) {
    protocol::ExecutionResult r = result();
    j["exit_code"] = r.exit_code ? nlohmann::ordered_json(*r.exit_code) : nlohmann::ordered_json();
    j["signal"] = r.signal.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(r.signal);
    if (!r.start_error.empty()) j["error"] = r.start_error;
  }
  if (with_content) {
    j[kind_traits(spec_.kind).content_field] = spec_.content;
    if (!spec_.argv.empty()) j["argv"] = spec_.argv;
  }
  return j;
}

protocol::StoredExecution Execution::stored() const {
  protocol::StoredExecution s;
  s.kind = kind_name(spec_.kind);
  s.id = spec_.id;
  s.content = spec_.content;
  s.argv = spec_.argv;
  s.fingerprint = spec_.fingerprint;
  s.cwd = spec_.cwd;
  s.uid = spec_.uid;
  s.gid = spec_.gid;
  s.owner = spec_.owner;
  s.language = spec_.language;
  s.background = spec_.background;
  s.tty = spec_.tty;
  s.stdin_open = spec_.stdin_open;
  s.stdin_accepted = stdin_accepted_;
  s.started_ns = started_ns_;
  s.finished_ns = finished_ns_;
  s.pgid = pgid_;
  s.boot_id = other_boot_id_.empty() ? registry_.boot_id() : other_boot_id_;
  s.start_ticks = start_ticks_;
  s.finished = done();
  s.lost = lost();
  s.result = result();
  s.output_total = produced_[0] + produced_[1] + produced_[2];
  return s;
}

nlohmann::ordered_json Execution::journal_entry() const {
  return journal::run_entry(spec_, result(), started_ns_, finished_ns_, lost(), stdin_accepted_);
}

}  // namespace execd::exec
