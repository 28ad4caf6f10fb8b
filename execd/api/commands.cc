// execd/api/commands: see header.
#include "execd/api/commands.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <unistd.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "fs/atomic_file.h"
#include "fs/expand.h"
#include "fs/small_file.h"
#include "execd/api/api.h"
#include "execd/api/awaiter.h"
#include "execd/api/journal.h"
#include "execd/http/connection.h"
#include "execd/api/sessions.h"
#include "protocol/errors.h"
#include "protocol/requests.h"
#include "pty/log_cursor.h"
#include "pty/pool_job.h"
#include "pty/spawn.h"

namespace execd::api {

using protocol::ApiError;
namespace codes = protocol::codes;

// ---------------------------------------------------------------------------
// Resume readers: GET /command/{id}/stream and repeated starts with the same
// id. Each is its own Source: it replays from the retained log (reads on the
// threadpool), then follows live. Falling behind while live sends it back to
// the log, so the command never waits for it, unless the output has grown
// past the log (nothing to replay from): then, and only then, it holds the
// command back like the original stream does.

class ResumeReader final : public http::Source {
 public:
  static constexpr size_t kReadChunk = 256 << 10;

  ResumeReader(http::Exchange& ex, CommandRecord& rec, protocol::Framing framing, uint64_t out_from,
               uint64_t err_from, bool attach)
      : ex_(ex), rec_(&rec), enc_(framing), attach_(attach), self_(std::make_shared<ResumeReader*>(this)) {
    want_[0] = out_from;
    want_[1] = err_from;
    rec.readers.insert(this);
  }
  ~ResumeReader() override {
    *self_ = nullptr;
    detach();
  }

  // The command runs (or ran): head, init, gap events, then the output.
  void begin() {
    if (mode_ != Mode::pending || !rec_) return;
    ex_.begin_chunked(200,
                      {std::string("Content-Type: ") + enc_.content_type(), "Cache-Control: no-cache",
                       "X-Accel-Buffering: no"},
                      /*flush_now=*/false);
    std::string buf = ex_.take_buffer();
    int64_t now = unix_ms();
    enc_.init(buf, rec_->id, now);
    enc_.ping(buf, now);
    last_ping_ms_ = ex_.connection().host().now_ms();
    if (attach_ && rec_->background) {
      // The original stream of a background command said only this much.
      buf += "{\"type\":\"execution_complete\",\"timestamp\":" + std::to_string(now) + "}";
      buf += enc_.framing() == protocol::Framing::exact ? "\n" : "\n\n";
      mode_ = Mode::done;
      detach();
      return ex_.end(std::move(buf));
    }
    for (int s = 0; s < 2; ++s) {
      auto plan = protocol::plan_resume(want_[s], rec_->index.stored(s), rec_->produced[s]);
      if (plan.gap) enc_.gap(buf, static_cast<protocol::OutputStream>(s), want_[s], plan.from, now);
      want_[s] = plan.from;
      enc_.start_at(static_cast<protocol::OutputStream>(s), want_[s]);
    }
    comb_ = std::min(rec_->index.locate(0, want_[0]), rec_->index.locate(1, want_[1]));
    if (!ex_.send(std::move(buf))) {
      mode_ = Mode::waiting;
      return;
    }
    pump();
  }

  // The start was refused before anything ran: the same answer as the first.
  void reject(const protocol::ApiError& e) {
    if (mode_ != Mode::pending) return;
    mode_ = Mode::done;
    detach();
    ex_.respond_error(e.status, e.code, e.message);
  }

  void on_output(int s, uint64_t stream_at, const uint8_t* data, size_t len, uint64_t stored) {
    if (mode_ != Mode::live && mode_ != Mode::holding) return;
    std::string buf = ex_.take_buffer();
    deliver(s, stream_at, data, len, buf);
    comb_ += stored;
    if (buf.empty() || ex_.send(std::move(buf))) return;
    if (mode_ == Mode::holding) return;
    if (stored == len && rec_->log && rec_->log->room() > 0) {
      mode_ = Mode::waiting;  // the rest is in the log: catch up from there
    } else {
      mode_ = Mode::holding;  // nothing to replay from: hold the command
      held_ = true;
      rec_->hold(+1);
    }
  }

  void on_done() {
    if (mode_ == Mode::live || mode_ == Mode::holding) finish();
  }

  void proceed() override {
    if (mode_ == Mode::waiting) return pump();
    if (mode_ == Mode::holding) {
      mode_ = Mode::live;
      release_hold();
    }
  }
  void stop() override {
    mode_ = Mode::done;
    *self_ = nullptr;
    detach();
  }
  void tick(uint64_t now_ms) override {
    if (mode_ == Mode::pending || mode_ == Mode::done || now_ms - last_ping_ms_ < ExecutionStream::kPingIntervalMs)
      return;
    last_ping_ms_ = now_ms;
    std::string buf;
    enc_.ping(buf, unix_ms());
    ex_.send(std::move(buf));
  }

 private:
  enum class Mode { pending, reading, waiting, live, holding, done };

  void pump() {
    if (!rec_ || mode_ == Mode::done) return;
    mode_ = Mode::reading;
    uint64_t end = rec_->index.end();
    if (comb_ < end && rec_->log) {
      uint64_t n = std::min<uint64_t>(end - comb_, kReadChunk);
      std::weak_ptr<ResumeReader*> self = self_;
      rec_->log->read(comb_, static_cast<size_t>(n), [self](int err, std::string data) {
        if (auto p = self.lock(); p && *p) (*p)->read_done(err, std::move(data));
      });
      return;
    }
    comb_ = end;
    // Everything stored has been given out. Output the log could not keep
    // (past --log-limit) while this reader was catching up is gone: say so.
    std::string buf = ex_.take_buffer();
    int64_t now = unix_ms();
    for (int s = 0; s < 2; ++s) {
      uint64_t total = rec_->done() ? rec_->result_bytes(s) : rec_->produced[s];
      if (want_[s] < total) {
        enc_.gap(buf, static_cast<protocol::OutputStream>(s), want_[s], total, now);
        want_[s] = total;
      }
    }
    if (rec_->done()) return finish(std::move(buf));
    mode_ = Mode::live;
    if (!buf.empty() && !ex_.send(std::move(buf))) mode_ = Mode::waiting;
  }

  void read_done(int err, std::string data) {
    if (!rec_ || mode_ != Mode::reading) return;
    if (err) {
      spdlog::warn("command {}: reading the retained output failed: {}", rec_->id, uv_strerror(err));
      mode_ = Mode::done;
      detach();
      return ex_.end();
    }
    if (data.empty()) {
      comb_ = rec_->index.end();  // the file holds less than the index says
      return pump();
    }
    std::string buf = ex_.take_buffer();
    for (const auto& piece : rec_->index.pieces(comb_, comb_ + data.size()))
      deliver(piece.stream, piece.stream_at, reinterpret_cast<const uint8_t*>(data.data()) + (piece.at - comb_),
              piece.len, buf);
    comb_ += data.size();
    if (!buf.empty() && !ex_.send(std::move(buf))) {
      mode_ = Mode::waiting;
      return;
    }
    pump();
  }

  void deliver(int s, uint64_t at, const uint8_t* data, uint64_t n, std::string& buf) {
    if (at + n <= want_[s]) return;
    auto os = static_cast<protocol::OutputStream>(s);
    if (at > want_[s]) enc_.gap(buf, os, want_[s], at, unix_ms());
    uint64_t skip = want_[s] > at ? want_[s] - at : 0;
    enc_.output(buf, os, data + skip, static_cast<size_t>(n - skip), unix_ms());
    want_[s] = at + n;
  }

  void finish(std::string buf = {}) {
    if (!rec_) return;
    protocol::ExecutionResult r = rec_->result();
    mode_ = Mode::done;
    detach();
    int64_t now = unix_ms();
    enc_.flush(buf, protocol::OutputStream::out, now);
    enc_.flush(buf, protocol::OutputStream::err, now);
    enc_.terminal(buf, r, now);
    ex_.end(std::move(buf));
  }

  void release_hold() {
    if (held_ && rec_) rec_->hold(-1);
    held_ = false;
  }
  void detach() {
    if (!rec_) return;
    release_hold();
    rec_->readers.erase(this);
    rec_ = nullptr;
  }

  http::Exchange& ex_;
  CommandRecord* rec_;
  protocol::EventEncoder enc_;
  bool attach_;
  std::shared_ptr<ResumeReader*> self_;
  Mode mode_ = Mode::pending;
  uint64_t want_[2] = {0, 0};
  uint64_t comb_ = 0;
  bool held_ = false;
  uint64_t last_ping_ms_ = 0;
};

// ---------------------------------------------------------------------------
// stdin: POST /command/{id}/stdin streams its body into the command's stdin.
// The body is paused while more than kStdinQueue bytes wait for the command
// to read them; a write paused longer than --stdin-timeout answers 503 with
// the offset reached, so the client can retry with ?offset=.

class StdinBody final : public http::Source {
 public:
  static constexpr size_t kStdinQueue = 256 << 10;

  StdinBody(http::Exchange& ex, CommandRecord& rec, uint64_t skip, bool eof, int64_t timeout_ms)
      : ex_(ex), rec_(&rec), skip_(skip), eof_(eof), timeout_ms_(timeout_ms) {
    rec.stdin_body = this;
  }
  ~StdinBody() override { detach(); }

  void on_body(const char* data, size_t len) override {
    if (!rec_ || !rec_->stdin_writer) return;
    if (skip_ >= len) {
      skip_ -= len;
      return;
    }
    data += skip_;
    len -= static_cast<size_t>(skip_);
    skip_ = 0;
    CommandRecord* rec = rec_;
    rec->stdin_accepted += len;
    // May fail at once (the command closed its stdin), which ends this write.
    rec->stdin_writer->write(data, len);
    if (!rec_) return;
    if (!paused_ && rec->stdin_writer && rec->stdin_writer->queued() > kStdinQueue) {
      paused_ = true;
      paused_since_ms_ = ex_.connection().host().now_ms();
      ex_.pause_body();
    }
  }

  // The command took everything queued.
  void drained() {
    if (!paused_) return;
    paused_ = false;
    ex_.resume_body();
  }

  void complete() {
    if (!rec_) return;
    CommandRecord* rec = rec_;
    detach();
    if (eof_) close_stdin(*rec);
    respond_offset(ex_, *rec);
  }

  void fail(int status, std::string_view code, const std::string& message) {
    if (!rec_) return;
    uint64_t offset = rec_->stdin_accepted;
    detach();
    nlohmann::ordered_json j;
    j["code"] = code;
    j["message"] = message;
    j["offset"] = offset;
    if (paused_) ex_.resume_body();
    ex_.respond_json(status, j.dump());
  }

  void stop() override { detach(); }
  void tick(uint64_t now_ms) override {
    if (rec_ && paused_ && timeout_ms_ >= 0 && now_ms - paused_since_ms_ >= static_cast<uint64_t>(timeout_ms_))
      fail(503, codes::kRuntimeError, "the command is not reading its stdin (waited " + std::to_string(timeout_ms_) + " ms)");
  }

  static void respond_offset(http::Exchange& ex, const CommandRecord& rec) {
    ex.respond_json(200, "{\"offset\":" + std::to_string(rec.stdin_accepted) + "}");
  }
  static void close_stdin(CommandRecord& rec) {
    if (!rec.stdin_eof && rec.tty && rec.stdin_writer) rec.stdin_writer->write("\x04", 1);
    if (rec.tty) {
      rec.stdin_eof = true;
      return;  // the terminal stays: the command may still print
    }
    rec.stdin_eof = true;
    if (rec.stdin_writer && rec.stdin_writer->queued() == 0) {
      rec.stdin_writer->close();
      rec.stdin_writer = nullptr;
    }
  }

 private:
  void detach() {
    if (rec_ && rec_->stdin_body == this) rec_->stdin_body = nullptr;
    rec_ = nullptr;
  }
  http::Exchange& ex_;
  CommandRecord* rec_;
  uint64_t skip_;
  bool eof_;
  int64_t timeout_ms_;
  bool paused_ = false;
  uint64_t paused_since_ms_ = 0;
};

// ---------------------------------------------------------------------------
// Records

CommandRecord::~CommandRecord() {
  if (cmd) cmd->release();
  if (stdin_writer) stdin_writer->close();
}

void CommandRecord::on_output(pty::Stream s, const uint8_t* data, size_t len) {
  int si = static_cast<int>(s);
  uint64_t stored = log ? std::min<uint64_t>(len, log->room()) : 0;
  if (log) log->append(data, len);
  if (stored) {
    index.add(static_cast<uint8_t>(si), stored);
    std::string entry = protocol::OutputIndex::encode_entry(static_cast<uint8_t>(si), stored);
    if (index_log) index_log->append(reinterpret_cast<const uint8_t*>(entry.data()), entry.size());
  }
  uint64_t at = produced[si];
  produced[si] += len;
  if (stream) stream->output(static_cast<protocol::OutputStream>(s), data, len);
  if (!readers.empty()) {
    std::vector<ResumeReader*> rs(readers.begin(), readers.end());
    for (ResumeReader* r : rs)
      if (readers.count(r)) r->on_output(si, at, data, len, stored);
  }
  if (log && log->over_budget()) update_pause();
}

void CommandRecord::update_pause() {
  if (cmd) cmd->set_paused(client_paused || holds > 0 || (log && log->over_budget()));
}

void CommandRecord::hold(int delta) {
  holds += delta;
  update_pause();
}

bool CommandRecord::in_use() const {
  return !readers.empty() || persisting || persist_queued || stdin_body || (log && log->busy()) || (index_log && index_log->busy());
}

void CommandRecord::set_client_paused(bool paused) {
  client_paused = paused;
  update_pause();
}

void CommandRecord::client_gone() {
  client_paused = false;
  update_pause();
}

void CommandRecord::on_finished(const pty::Outcome& o) {
  outcome = o;
  finished_ns = unix_ns();
  if (ExecutionStream* s = stream.get()) s->finish(result());
  registry.finished(this);
}

uint64_t CommandRecord::result_bytes(int s) const {
  protocol::ExecutionResult r = result();
  return s == 0 ? r.stdout_bytes : r.stderr_bytes;
}

protocol::ExecutionResult CommandRecord::result() const {
  if (final_result) return *final_result;
  protocol::ExecutionResult r;
  r.start_error = start_error;
  if (!outcome) {
    r.stdout_bytes = produced[0];
    r.stderr_bytes = produced[1];
    return r;
  }
  const pty::Outcome& o = *outcome;
  r.exit_code = o.exit_code;
  set_signal(r, o.signal);
  r.timed_out = o.timed_out;
  r.interrupted = o.interrupted;
  r.execution_time_ms = o.duration_ms;
  r.stdout_bytes = o.bytes[0];
  r.stderr_bytes = o.bytes[1];
  r.stdout_sha256 = protocol::lower_hex(o.sha256[0]);
  r.stderr_sha256 = protocol::lower_hex(o.sha256[1]);
  r.user_cpu_ms = o.user_cpu_ms;
  r.system_cpu_ms = o.system_cpu_ms;
  r.max_rss_kib = o.max_rss_kib;
  r.leftover_processes = o.leftover_processes;
  r.oom_killed = o.oom_killed;
  r.pids_limit_hit = o.pids_limit_hit;
  return r;
}

std::string CommandRecord::status_json() const {
  nlohmann::ordered_json j;
  j["id"] = id;
  j["content"] = content;
  bool running = !done();
  j["running"] = running;
  protocol::ExecutionResult r = result();
  if (lost) {
    // Honest: execd went away while it ran; how it ended is unknown.
    j["lost"] = true;
    j["error"] = "lost: execd stopped while the command was running";
  } else if (!running) {
    if (!r.start_error.empty()) {
      j["exit_code"] = 255;
      j["error"] = r.start_error;
    } else if (r.exit_code) {
      j["exit_code"] = *r.exit_code;
      if (*r.exit_code != 0) j["error"] = "exit status " + std::to_string(*r.exit_code);
    } else {
      j["exit_code"] = -1;
      j["error"] = "signal: " + r.signal_text;
    }
  }
  j["started_at"] = rfc3339_nano(started_ns);
  if (finished_ns) j["finished_at"] = rfc3339_nano(finished_ns);
  // Beyond the Go daemon: the structured result once finished.
  j["background"] = background;
  if (done() && r.start_error.empty() && !lost) {
    j["signal"] = r.signal.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(r.signal);
    j["timed_out"] = r.timed_out;
    j["interrupted"] = r.interrupted;
    j["execution_time"] = r.execution_time_ms;
    j["stdout_bytes"] = r.stdout_bytes;
    j["stderr_bytes"] = r.stderr_bytes;
    j["stdout_sha256"] = r.stdout_sha256;
    j["stderr_sha256"] = r.stderr_sha256;
    j["leftover_processes"] = r.leftover_processes;
    if (contained) {
      std::shared_ptr<pty::CommandCgroup> cg = cgroup.lock();
      int left = cg ? cg->population() : 0;  // gone: removed once empty
      if (left >= 0) j["processes_running"] = left;
    }
    if (r.oom_killed) j["oom_killed"] = true;
    if (r.pids_limit_hit) j["pids_limit_hit"] = true;
  } else if (lost) {
    j["stdout_bytes"] = r.stdout_bytes;
    j["stderr_bytes"] = r.stderr_bytes;
  }
  if (stdin_open) j["stdin_offset"] = stdin_accepted;
  if (reloaded) j["reloaded"] = true;
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

namespace {

// Read once: it cannot change while execd runs, and every command records it.
const std::string& boot_id() {
  static const std::string id = [] {
    std::string b = fs::read_small_file("/proc/sys/kernel/random/boot_id").value_or(std::string());
    while (!b.empty() && (b.back() == '\n' || b.back() == ' ')) b.pop_back();
    return b;
  }();
  return id;
}

}  // namespace

protocol::StoredCommand CommandRecord::stored() const {
  protocol::StoredCommand s;
  s.id = id;
  s.content = content;
  s.fingerprint = fingerprint;
  s.background = background;
  s.tty = tty;
  s.stdin_open = stdin_open;
  s.started_ns = started_ns;
  s.finished_ns = finished_ns;
  s.pgid = pgid;
  s.boot_id = this_boot ? boot_id() : other_boot_id;
  s.start_ticks = start_ticks;
  s.finished = done();
  s.lost = lost;
  s.result = result();
  s.output_total = produced[0] + produced[1];
  return s;
}

namespace {


// Field 22 of /proc/<pid>/stat: the process's start time in clock ticks.
uint64_t process_start_ticks(int64_t pid) {
  std::string stat = fs::read_small_file("/proc/" + std::to_string(pid) + "/stat").value_or(std::string());
  size_t close_paren = stat.rfind(')');
  if (close_paren == std::string::npos) return 0;
  // Fields from 3 (state) on, one space apart; starttime is field 22.
  size_t at = close_paren + 2;
  for (int i = 3; i < 22 && at < stat.size(); ++i) {
    at = stat.find(' ', at);
    if (at == std::string::npos) return 0;
    ++at;
  }
  return at < stat.size() ? std::strtoull(stat.c_str() + at, nullptr, 10) : 0;
}

// The records log (<state>/records.log): every record write appended, as
// protocol/command_record encodes a record (its JSON line and the line of
// its checksum), the last entry of an id winning. One file, so a write
// creates no inode and renames nothing: a file per record (write, fsync,
// rename, then an fsync of the directory) was a quarter of all CPU time in
// the /command round trip on ext4 without a journal, whose every inode
// allocation scans past the inodes freed in the last 30 s.
constexpr const char* kRecordsLog = "records.log";

// Each entry of `text` in order: fn(entry, record), record nullopt for one
// that does not decode (a torn tail, an edit); the scan then goes on from
// the next line.
template <class Fn>
void for_each_entry(std::string_view text, Fn fn) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t first = text.find('\n', pos);
    size_t second = first == std::string_view::npos ? first : text.find('\n', first + 1);
    std::string_view entry = text.substr(pos, second == std::string_view::npos ? second : second + 1 - pos);
    auto r = second == std::string_view::npos ? std::nullopt : protocol::decode_stored_command(entry);
    fn(entry, r);
    if (r) pos = second + 1;
    else if (first == std::string_view::npos) break;
    else pos = first + 1;
  }
}

// Writes `text` as the whole records log (temporary file, fsync, rename,
// fsync of the directory); the new log's descriptor, for appending, or -1
// with errno.
int replace_log(const std::string& dir, std::string_view text) {
  std::string path = dir + "/" + kRecordsLog, tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  int err = fs::write_all(fd, text);
  if (!err && fsync(fd) != 0) err = errno;
  if (!err && rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err) {
    close(fd);
    unlink(tmp.c_str());
    errno = err;
    return -1;
  }
  fs::fsync_directory(dir);
  return fd;
}

// One pool job writes a batch of records (persist_queue_ order): one append
// and one fdatasync. A burst of commands used to queue one job per record
// write, each holding its encoded record until its turn.
struct PersistBatch {
  struct Item {
    std::string id;
    protocol::StoredCommand record;  // a copy: encoded on the pool
  };
  CommandRegistry* reg;
  std::string dir;
  int fd;         // the log, open for appending
  uint64_t size;  // its length: a failed append is cut back to it
  std::vector<Item> items;
  // Set: the log is rewritten with the last entry of each of these ids
  // (the records still kept), then this batch.
  std::optional<std::set<std::string>> compact;
  // results
  int err = 0;
  int new_fd = -1;  // after a rewrite (the old descriptor is closed)
  uint64_t new_size = 0;
  size_t entries = 0;  // after a rewrite: entries in the new log
};

void compact_log(PersistBatch& b, const std::string& appended) {
  std::string old = fs::read_small_file(b.dir + "/" + kRecordsLog, SIZE_MAX).value_or(std::string());
  std::map<std::string, std::string_view> last;
  for_each_entry(old, [&](std::string_view entry, const std::optional<protocol::StoredCommand>& r) {
    if (r && b.compact->count(r->id)) last[r->id] = entry;
  });
  for (const auto& item : b.items) last.erase(item.id);
  std::string text;
  for (const auto& [id, entry] : last) text += entry;
  b.entries = last.size() + b.items.size();
  text += appended;
  int fd = replace_log(b.dir, text);
  if (fd < 0) return;  // the old log stays and takes the append
  close(b.fd);
  b.new_fd = fd;
  b.new_size = text.size();
}

void write_batch(PersistBatch& batch) {
  PersistBatch* b = &batch;
  std::string text;
  for (auto& item : b->items) {
    // Read here, not at spawn: /proc/<pid>/stat waits while the child is
    // still inside execve, which held the loop for up to 2 ms per start.
    protocol::StoredCommand& r = item.record;
    if (!r.finished && r.pgid > 0 && r.start_ticks == 0) r.start_ticks = process_start_ticks(r.pgid);
    text += protocol::encode_stored_command(r);
  }
  if (b->compact) {
    compact_log(*b, text);
    if (b->new_fd >= 0) return;
  }
  b->new_size = b->size;
  if (b->fd < 0) {
    b->err = EBADF;
    return;
  }
  b->err = fs::write_all(b->fd, text);
  if (b->err) {
    // Whole entries only: what went out of this one is cut.
    if (ftruncate(b->fd, static_cast<off_t>(b->size)) != 0) {}
    return;
  }
  b->new_size = b->size + text.size();
  if (fdatasync(b->fd) != 0) b->err = errno;
}

}  // namespace

CommandRegistry::CommandRegistry(Context& ctx) : ctx_(ctx) {
  ctx.commands = this;
  uv_timer_init(ctx.loop, &sweep_timer_);
  sweep_timer_.data = this;
  uv_timer_init(ctx.loop, &persist_timer_);
  persist_timer_.data = this;
  sweep_period_ = static_cast<uint64_t>(std::clamp<int64_t>(ctx.config.retention_ms / 4, 100, 10000));
  uv_timer_start(&sweep_timer_, on_sweep, sweep_period_, sweep_period_);
  uv_unref(reinterpret_cast<uv_handle_t*>(&sweep_timer_));
  load();
}

CommandRegistry::~CommandRegistry() {
  if (log_fd_ >= 0) ::close(log_fd_);
  ctx_.commands = nullptr;
}

void CommandRegistry::close() {
  closed_ = true;
  uv_close(reinterpret_cast<uv_handle_t*>(&sweep_timer_), nullptr);
  // What waits for the delay goes now; the loop runs until it is written.
  uv_timer_stop(&persist_timer_);
  write_next_batch();
  uv_close(reinterpret_cast<uv_handle_t*>(&persist_timer_), nullptr);
  for (auto& [id, rec] : records_) {
    if (rec->cmd) rec->cmd->release();
    rec->cmd = nullptr;
    if (rec->stdin_writer) rec->stdin_writer->close();
    rec->stdin_writer = nullptr;
    // The files stay: a restarted execd answers for them.
  }
}

void CommandRegistry::remove_files(const std::string& id) {
  for (const char* ext : {".record", ".output", ".index", ".record.tmp"})
    unlink((ctx_.config.state_dir + "/" + id + ext).c_str());
}

// Start-up: every record the last execd left in the state dir, before the
// loop serves anyone (blocking reads are fine here).
void CommandRegistry::load() {
  const std::string& dir = ctx_.config.state_dir;
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) names.emplace_back(e->d_name);
  closedir(d);
  auto ends_with = [](const std::string& s, std::string_view suffix) {
    return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  std::set<std::string> known;
  size_t torn = 0, lost = 0, expired = 0;
  std::string boot = boot_id();
  int64_t now = unix_ns();
  // The log, the last entry of an id winning; then the files of one record
  // each that an execd before the log wrote (read once, then in the log).
  std::map<std::string, protocol::StoredCommand> stored_by_id;
  std::string log_text = fs::read_small_file(dir + "/" + kRecordsLog, SIZE_MAX).value_or(std::string());
  for_each_entry(log_text, [&](std::string_view entry, std::optional<protocol::StoredCommand>& r) {
    if (r) stored_by_id[r->id] = std::move(*r);
    else if (!entry.empty() && entry[0] == '{') ++torn;  // a crash mid-append; the rewrite below drops it
  });
  std::string().swap(log_text);
  std::vector<std::string> legacy;
  for (const std::string& name : names) {
    if (name.rfind("session-", 0) == 0 && ends_with(name, ".sh")) {
      unlink((dir + "/" + name).c_str());  // a bash session's run script; sessions do not survive restarts
      continue;
    }
    if (ends_with(name, ".record.tmp") || name == std::string(kRecordsLog) + ".tmp") {
      unlink((dir + "/" + name).c_str());  // a write that never finished
      continue;
    }
    if (!ends_with(name, ".record")) continue;
    legacy.push_back(dir + "/" + name);
    std::string id = name.substr(0, name.size() - 7);
    auto stored = protocol::decode_stored_command(fs::read_small_file(dir + "/" + name).value_or(std::string()));
    if (!stored || stored->id != id) {
      ++torn;
      if (!stored_by_id.count(id)) remove_files(id);
      continue;
    }
    stored_by_id.emplace(id, std::move(*stored));  // the log's entry is newer
  }
  std::vector<std::unique_ptr<CommandRecord>> loaded;
  std::string kept;  // the log as rewritten: one entry per record kept
  for (auto& [id, entry] : stored_by_id) {
    protocol::StoredCommand* stored = &entry;
    auto rec = std::make_unique<CommandRecord>(*this);
    rec->reloaded = true;
    rec->id = stored->id;
    rec->content = stored->content;
    rec->fingerprint = stored->fingerprint;
    rec->background = stored->background;
    rec->tty = stored->tty;
    rec->stdin_open = stored->stdin_open;
    rec->started_ns = stored->started_ns;
    rec->finished_ns = stored->finished_ns;
    rec->pgid = stored->pgid;
    if (stored->boot_id == boot)
      rec->this_boot = true;
    else
      rec->other_boot_id = stored->boot_id;
    rec->start_ticks = stored->start_ticks;
    rec->lost = stored->lost;
    // The output: the log file and its index, as far as both got.
    std::string log_path = dir + "/" + id + ".output";
    struct stat st;
    bool have_log = stat(log_path.c_str(), &st) == 0;
    uint64_t size = have_log ? static_cast<uint64_t>(st.st_size) : 0;
    rec->index = protocol::OutputIndex::decode(fs::read_small_file(dir + "/" + id + ".index").value_or(std::string()), size);
    rec->log = std::make_unique<OutputLog>(ctx_.loop, log_path, static_cast<uint64_t>(ctx_.config.log_limit_bytes));
    if (have_log) rec->log->adopt(size, std::max(stored->output_total, size));
    protocol::ExecutionResult r = stored->result;
    if (!stored->finished) {
      // It was running when execd went away: end its process group (if the
      // same process still leads it) and say so.
      ++lost;
      if (stored->pgid > 0 && stored->boot_id == boot && stored->start_ticks != 0 &&
          process_start_ticks(stored->pgid) == stored->start_ticks) {
        spdlog::warn("command {} was running when execd stopped: ending its process group {}", id, stored->pgid);
        kill(-static_cast<pid_t>(stored->pgid), SIGKILL);
      }
      rec->lost = true;
      rec->finished_ns = now;
      r = {};
      r.start_error = "lost: execd stopped while the command was running";
      r.stdout_bytes = rec->index.stored(0);
      r.stderr_bytes = rec->index.stored(1);
    }
    rec->produced[0] = r.stdout_bytes;
    rec->produced[1] = r.stderr_bytes;
    rec->final_result = std::make_unique<protocol::ExecutionResult>(std::move(r));
    if (now - rec->finished_ns >= ctx_.config.retention_ms * 1000000) {
      ++expired;
      rec.reset();
      remove_files(id);
      continue;
    }
    known.insert(id);
    kept += protocol::encode_stored_command(*stored);
    loaded.push_back(std::move(rec));
  }
  std::map<std::string, protocol::StoredCommand>().swap(stored_by_id);
  // Start-up rewrites the log: a torn tail goes (appends would otherwise
  // follow it), expired records go, and the per-record files are in it now.
  log_fd_ = replace_log(dir, kept);
  if (log_fd_ < 0) {
    spdlog::warn("cannot write the records log {}/{}: {}; records will not survive a restart", dir, kRecordsLog,
                 strerror(errno));
  } else {
    log_size_ = kept.size();
    log_entries_ = loaded.size();
    for (const std::string& path : legacy) unlink(path.c_str());
  }
  // Output and index files whose record is gone (swept while execd was down,
  // or a record that never got written).
  for (const std::string& name : names)
    for (std::string_view ext : {".output", ".index"})
      if (ends_with(name, ext) && !known.count(name.substr(0, name.size() - ext.size())))
        unlink((dir + "/" + name).c_str());
  std::sort(loaded.begin(), loaded.end(), [](const auto& a, const auto& b) { return a->finished_ns < b->finished_ns; });
  for (auto& rec : loaded) {
    CommandRecord* raw = rec.get();
    raw->in_finished_order = true;
    finished_order_.push_back(raw);
    records_[raw->id] = std::move(rec);
    if (raw->lost && !raw->persisting) {
      persist(raw);
      journal_finished(raw);
    }
  }
  if (!loaded.empty() || torn || expired)
    spdlog::info("state dir {}: {} command records reloaded ({} lost), {} expired, {} torn records skipped", dir,
                 loaded.size(), lost, expired, torn);
  if (finished_order_.size() > ctx_.config.max_records) uv_timer_start(&sweep_timer_, on_sweep, 0, sweep_period_);
}

CommandRecord* CommandRegistry::create(std::string id, std::string content, bool background) {
  auto rec = std::make_unique<CommandRecord>(*this);
  rec->id = id.empty() ? random_id32() : std::move(id);
  rec->content = std::move(content);
  rec->background = background;
  rec->started_ns = unix_ns();
  rec->log = std::make_unique<OutputLog>(ctx_.loop, ctx_.config.state_dir + "/" + rec->id + ".output",
                                         static_cast<uint64_t>(ctx_.config.log_limit_bytes));
  rec->index_log = std::make_unique<OutputLog>(ctx_.loop, ctx_.config.state_dir + "/" + rec->id + ".index",
                                               UINT64_MAX / 2);
  CommandRecord* raw = rec.get();
  raw->log->set_on_written([raw] { raw->update_pause(); });
  records_[raw->id] = std::move(rec);
  ++running_;
  return raw;
}

CommandRecord* CommandRegistry::create_external(std::string id, std::string content) {
  if (find(id)) return nullptr;
  CommandRecord* r = create(std::move(id), std::move(content), false);
  r->external = true;
  r->fingerprint = "session-run";
  r->started_ns = unix_ns();
  persist(r);
  return r;
}

void CommandRegistry::finish_external(CommandRecord* r, const pty::Outcome& outcome) {
  if (r->done()) return;
  r->outcome = outcome;
  r->finished_ns = unix_ns();
  finished(r);
}

CommandRecord* CommandRegistry::find(const std::string& id) {
  auto it = records_.find(id);
  return it == records_.end() ? nullptr : it->second.get();
}

void CommandRegistry::discard(CommandRecord* r, const protocol::ApiError& why) {
  --running_;
  std::vector<ResumeReader*> rs(r->readers.begin(), r->readers.end());
  for (ResumeReader* reader : rs) reader->reject(why);
  std::string id = r->id;
  if (r->log) r->log->remove();
  if (r->index_log) r->index_log->remove();
  if (r->in_finished_order)  // not expected (it never ran): no dangling pointer all the same
    finished_order_.erase(std::find(finished_order_.begin(), finished_order_.end(), r));
  auto it = records_.find(id);
  // Nothing ran, so nothing was written: no log request can be in flight.
  if (it != records_.end()) records_.erase(it);
}

void CommandRegistry::persist(CommandRecord* r) {
  if (r->persist_queued) return;  // encoded when its batch starts: the latest state goes
  if (r->persisting) {
    r->dirty = true;
    return;
  }
  r->persist_queued = true;
  persist_queue_.push_back(r->id);
  schedule_batch();
}

// A batch starts kPersistDelayMs after the previous one ended (or after the
// first record of a quiet spell), unless a full one waits: a short command
// ends within that time, and its start and end go out as one entry (half the
// log, and one fdatasync for many records).
void CommandRegistry::schedule_batch() {
  if (batch_in_flight_ || persist_queue_.empty()) return;
  if (closed_ || persist_queue_.size() >= kPersistBatch) return write_next_batch();
  if (uv_is_active(reinterpret_cast<uv_handle_t*>(&persist_timer_))) return;
  uv_timer_start(
      &persist_timer_, [](uv_timer_t* t) { static_cast<CommandRegistry*>(t->data)->write_next_batch(); },
      kPersistDelayMs, 0);
}

void CommandRegistry::write_next_batch() {
  if (batch_in_flight_) return;
  if (!closed_) uv_timer_stop(&persist_timer_);
  auto batch = std::make_unique<PersistBatch>(PersistBatch{this, ctx_.config.state_dir, log_fd_, log_size_, {}, {}});
  while (!persist_queue_.empty() && batch->items.size() < kPersistBatch) {
    std::string id = std::move(persist_queue_.front());
    persist_queue_.pop_front();
    CommandRecord* r = find(id);
    if (!r || !r->persist_queued) continue;
    r->persist_queued = false;
    r->persisting = true;
    r->dirty = false;
    batch->items.push_back({std::move(id), r->stored()});
  }
  if (batch->items.empty()) return;
  // Entries of records since swept, and the older entries of every record,
  // go when the log holds more than twice what is kept (plus some slack, so
  // a few records are not rewritten over and over).
  if (log_entries_ + batch->items.size() > 2 * records_.size() + 512) {
    batch->compact.emplace();
    for (const auto& [id, rec] : records_) batch->compact->insert(id);
  }
  pty::queue_job<PersistBatch>(ctx_.loop, std::move(batch), write_batch, [](PersistBatch& batch, int) {
    PersistBatch* b = &batch;
    CommandRegistry& reg = *b->reg;
    reg.batch_in_flight_ = false;
    if (b->new_fd >= 0) {
      reg.log_fd_ = b->new_fd;
      reg.log_entries_ = b->entries;
    } else if (!b->err) {
      reg.log_entries_ += b->items.size();
    }
    reg.log_size_ = b->new_size;
    if (b->err)
      spdlog::warn("cannot write {} command records to {}/{}: {}", b->items.size(), b->dir, kRecordsLog,
                   strerror(b->err));
    for (auto& item : b->items) {
      CommandRecord* rec = reg.find(item.id);
      if (!rec) continue;
      if (rec->start_ticks == 0) rec->start_ticks = item.record.start_ticks;
      rec->persisting = false;
      // The index file is only ever written (a restart reads it from disk,
      // the sweep unlinks it by name): a finished record lets its writer go
      // once it has settled, 350 bytes of every retained record.
      if (rec->done() && rec->index_log && rec->index_log->settled()) rec->index_log.reset();
      if (rec->dirty) {
        rec->dirty = false;
        reg.persist(rec);
      }
    }
    reg.schedule_batch();
  });
  batch_in_flight_ = true;
}

void CommandRegistry::journal_finished(CommandRecord* r) {
  // A session run has its own entry (type session_run).
  if (r->external || !ctx_.journal || !ctx_.journal->enabled()) return;
  protocol::ExecutionResult res = r->result();
  nlohmann::ordered_json e;
  e["type"] = "command";
  e["time"] = rfc3339_nano(r->finished_ns ? r->finished_ns : unix_ns());
  e["id"] = r->id;
  e["command"] = r->content;
  e["cwd"] = r->cwd;
  e["uid"] = r->uid ? nlohmann::ordered_json(*r->uid) : nlohmann::ordered_json(getuid());
  if (r->gid) e["gid"] = *r->gid;
  e["background"] = r->background;
  e["tty"] = r->tty;
  e["started_at"] = rfc3339_nano(r->started_ns);
  e["finished_at"] = rfc3339_nano(r->finished_ns);
  nlohmann::ordered_json out;
  out["exit_code"] = res.exit_code ? nlohmann::ordered_json(*res.exit_code) : nlohmann::ordered_json();
  out["signal"] = res.signal.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(res.signal);
  out["timed_out"] = res.timed_out;
  out["interrupted"] = res.interrupted;
  out["lost"] = r->lost;
  if (!res.start_error.empty()) out["error"] = res.start_error;
  out["execution_time_ms"] = res.execution_time_ms;
  out["stdout_bytes"] = res.stdout_bytes;
  out["stderr_bytes"] = res.stderr_bytes;
  out["stdout_sha256"] = res.stdout_sha256;
  out["stderr_sha256"] = res.stderr_sha256;
  if (r->stdin_open) out["stdin_bytes"] = r->stdin_accepted;
  e["result"] = out;
  ctx_.journal->append(e);
}

void CommandRegistry::finished(CommandRecord* r) {
  --running_;
  if (r->cmd) {
    r->cmd->release();
    r->cmd = nullptr;
  }
  if (r->finished_ns == 0) r->finished_ns = unix_ns();
  // No more output: the files close once written (retained records would
  // otherwise hold two descriptors each for the whole retention time).
  if (r->log) r->log->seal();
  if (r->index_log) r->index_log->seal();
  if (r->stdin_body) r->stdin_body->fail(409, codes::kRuntimeError, "the command has finished");
  if (r->stdin_writer) {
    r->stdin_writer->close();
    r->stdin_writer = nullptr;
  }
  persist(r);
  journal_finished(r);
  if (!r->readers.empty()) {
    std::vector<ResumeReader*> rs(r->readers.begin(), r->readers.end());
    for (ResumeReader* reader : rs)
      if (r->readers.count(reader)) reader->on_done();
  }
  if (!r->in_finished_order) {
    r->in_finished_order = true;
    finished_order_.push_back(r);
  }
  // Swept from the timer, never from inside the command's own callback.
  if (finished_order_.size() > ctx_.config.max_records) uv_timer_start(&sweep_timer_, on_sweep, 0, sweep_period_);
}

void CommandRegistry::sweep() {
  int64_t now = unix_ns();
  while (!finished_order_.empty()) {
    auto it = records_.find(finished_order_.front()->id);
    bool expired = now - it->second->finished_ns >= ctx_.config.retention_ms * 1000000;
    if (!expired && finished_order_.size() <= ctx_.config.max_records) break;
    // Readers, a record write, or a read or write of the retained log in
    // flight point at it: next sweep.
    if (it->second->in_use()) break;
    if (it->second->log) it->second->log->remove();
    if (it->second->index_log) it->second->index_log->remove();
    std::string id = it->first;
    records_.erase(it);
    finished_order_.pop_front();
    for (const char* ext : {".index", ".output"}) {
      auto* req = new uv_fs_t;
      uv_fs_unlink(ctx_.loop, req, (ctx_.config.state_dir + "/" + id + ext).c_str(), [](uv_fs_t* q) {
        uv_fs_req_cleanup(q);
        delete q;
      });
    }
  }
}

void CommandRegistry::signal_all(int sig) {
  for (auto& [id, rec] : records_)
    if (rec->cmd && rec->cmd->running()) rec->cmd->signal_group(sig);
}

// ---------------------------------------------------------------------------
// Preparing a command: everything that may block (stat, passwd and group
// lookups, reading the EXECD_ENVS file) runs on the threadpool.

namespace {


struct PrepareWork : Awaitable {
  CommandRegistry* reg;
  protocol::CommandRequest req;
  protocol::Framing framing;
  std::string id;  // the reserved record
  // results
  pty::SpawnOptions opts;
  std::optional<ApiError> error;
};

// EXECD_ENVS: KEY=VALUE lines, '#' comments and blank lines skipped, values
// $VAR-expanded against execd's environment, no quote processing.
void apply_env_file(const std::string& path, const std::vector<std::string>& base, std::vector<std::string>& env) {
  const std::string text = fs::read_small_file(path).value_or(std::string());
  for (size_t at = 0, end; at < text.size(); at = end + 1) {
    end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos || eq <= start) continue;
    std::string key = line.substr(start, eq - start);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    std::string value;
    std::string err;
    if (!fs::expand_vars(line.substr(eq + 1), [&](std::string_view n) { return env_lookup(base, n); }, value, err,
                         /*allow_undefined=*/true))
      continue;
    pty::set_env(env, key, value);
  }
}

void prepare(PrepareWork& work) {
  PrepareWork* w = &work;
  Context& ctx = w->reg->ctx();
  const auto& req = w->req;
  auto& opts = w->opts;
  std::vector<std::string> env = ctx.base_env;
  if (const char* envs_file = env_lookup(ctx.base_env, "EXECD_ENVS"); envs_file && *envs_file)
    apply_env_file(envs_file, ctx.base_env, env);

  if (req.uid) {
    struct passwd pw, *found = nullptr;
    std::vector<char> buf(16384);
    getpwuid_r(*req.uid, &pw, buf.data(), buf.size(), &found);
    gid_t gid = req.gid ? *req.gid : (found ? found->pw_gid : static_cast<gid_t>(*req.uid));
    opts.uid = *req.uid;
    opts.gid = gid;
    if (found) {
      int n = 64;
      std::vector<gid_t> groups(static_cast<size_t>(n));
      if (getgrouplist(found->pw_name, gid, groups.data(), &n) < 0) {
        groups.resize(static_cast<size_t>(n));
        getgrouplist(found->pw_name, gid, groups.data(), &n);
      }
      groups.resize(static_cast<size_t>(n));
      opts.groups = groups;
      pty::set_env(env, "HOME", found->pw_dir);
      pty::set_env(env, "USER", found->pw_name);
      pty::set_env(env, "LOGNAME", found->pw_name);
    } else {
      // No passwd entry: no supplementary groups, and never root's group by
      // accident (the Go daemon ran such commands with gid 0).
      opts.groups = {gid};
      pty::set_env(env, "HOME", "/");
    }
  }
  for (const auto& [k, v] : req.envs) pty::set_env(env, k, v);

  if (!req.cwd.empty()) {
    // Expanded with the same variables the command will see (the Go daemon
    // validated with one set and ran with another).
    std::string cwd, err;
    auto lookup = [&](std::string_view n) { return env_lookup(env, n); };
    if (!fs::expand_vars(req.cwd, lookup, cwd, err, false)) {
      w->error = ApiError{400, std::string(codes::kInvalidRequestBody), "invalid request, validation error: " + err};
      return;
    }
    if (!cwd.empty() && cwd[0] == '~' && (cwd.size() == 1 || cwd[1] == '/')) {
      const char* home = env_lookup(ctx.base_env, "HOME");
      cwd = std::string(home ? home : "/") + cwd.substr(1);
    }
    struct stat st;
    if (stat(cwd.c_str(), &st) != 0) {
      w->error = ApiError{400, std::string(codes::kInvalidRequestBody),
                          "invalid request, validation error: working directory does not exist: " + cwd};
      return;
    }
    if (!S_ISDIR(st.st_mode)) {
      w->error = ApiError{400, std::string(codes::kInvalidRequestBody),
                          "invalid request, validation error: working directory is not a directory: " + cwd};
      return;
    }
    opts.cwd = cwd;
  }
  opts.program = ctx.shell;
  opts.argv = {ctx.shell, "-c", req.command};
  opts.env = std::move(env);
  opts.use_pty = req.tty;
  opts.rows = req.rows;
  opts.cols = req.cols;
}

// Needs the threadpool: a cwd to check, a user to look up, or an env file to read.
bool needs_pool(const Context& ctx, const protocol::CommandRequest& req) {
  const char* envs_file = env_lookup(ctx.base_env, "EXECD_ENVS");
  return req.uid || !req.cwd.empty() || (envs_file && *envs_file);
}


void start_command(CommandRegistry& reg, http::Exchange* ex, PrepareWork& w) {
  Context& ctx = reg.ctx();
  CommandRecord* rec = reg.find(w.id);
  if (!rec || !rec->starting()) return;  // cannot happen: a reserved record stays until it starts
  if (!w.error && ctx.shutting_down) w.error = ApiError{503, std::string(codes::kRuntimeError), "execd is shutting down"};
  if (w.error) {
    reg.discard(rec, *w.error);
    if (ex) ex->respond_error(w.error->status, w.error->code, w.error->message);
    return;
  }
  pty::CommandLimits limits;
  limits.timeout_ms = w.req.timeout_ms;
  limits.kill_grace_ms = ctx.config.kill_grace_ms;
  limits.resources.memory_bytes = w.req.limit_memory_bytes;
  limits.resources.pids = w.req.limit_pids;
  limits.resources.cpu_shares = w.req.limit_cpu_shares;
  std::string error;
  if (ex) {
    auto stream = std::make_unique<ExecutionStream>(*ex, w.framing);
    ExecutionStream& s = *stream;
    ex->attach(std::move(stream));
    s.start(*rec, rec->id);
  }
  if (w.req.stdin_open && !w.req.tty) w.opts.pipe_stdin = true;
  rec->cmd = pty::Command::start(ctx.loop, *ctx.reaper, *ctx.containment, w.opts, limits, rec, error);
  // Attached starts and early resume readers begin now, with the original.
  auto begin_readers = [rec] {
    std::vector<ResumeReader*> rs(rec->readers.begin(), rec->readers.end());
    for (ResumeReader* r : rs)
      if (rec->readers.count(r)) r->begin();
  };
  if (!rec->cmd) {
    // Contract 3.4: a start failure is still a 200 stream with init, then an error.
    spdlog::warn("command {} failed to start: {}", rec->id, error);
    rec->start_error = error;
    rec->final_result = std::make_unique<protocol::ExecutionResult>(rec->result());
    rec->finished_ns = unix_ns();
    if (ExecutionStream* s = rec->stream.get()) s->finish(rec->result());
    begin_readers();
    reg.finished(rec);
    return;
  }
  rec->pgid = rec->cmd->pid();
  rec->cgroup = rec->cmd->cgroup();
  rec->contained = rec->cmd->cgroup() != nullptr;
  rec->this_boot = true;  // start_ticks: read by the first record write
  if (w.req.stdin_open) {
    // The pipe's write end is ours now: closed when the client says eof (or
    // the command ends). With a PTY, eof is the terminal's ^D.
    int fd = rec->cmd->take_stdin();
    if (fd >= 0) {
      rec->stdin_writer = pty::FdWriter::open(
          ctx.loop, fd,
          [rec] {
            if (rec->stdin_body) rec->stdin_body->drained();
            if (rec->stdin_eof) StdinBody::close_stdin(*rec);
          },
          [rec](int err) {
            spdlog::info("command {}: stdin closed by the command ({})", rec->id, strerror(err));
            if (rec->stdin_body) rec->stdin_body->fail(409, codes::kRuntimeError, "the command closed its stdin");
            // Closed from the loop later: we are inside the writer's callback.
            rec->stdin_eof = true;
          });
    }
  }
  reg.persist(rec);
  spdlog::info("command {} started: pid {}{}", rec->id, rec->cmd->pid(), w.req.background ? " (background)" : "");
  if (w.req.background)
    if (ExecutionStream* s = rec->stream.get()) s->finish_background();
  begin_readers();
}

void after_prepare(PrepareWork& work, int) {
  PrepareWork* w = &work;
  // A client that left before anything started: a command it named still
  // starts (its retry attaches to it); one it did not name never will.
  http::Exchange* ex = w->exchange();
  if (!ex && w->req.id.empty()) {
    if (CommandRecord* rec = w->reg->find(w->id))
      w->reg->discard(rec, ApiError{499, std::string(codes::kRuntimeError), "the client left"});
    return;
  }
  start_command(*w->reg, ex, *w);
}

void handle_run(CommandRegistry& reg, http::Exchange& ex) {
  auto decoded = protocol::decode_command_request(ex.request().body);
  if (auto* err = std::get_if<protocol::DecodeError>(&decoded))
    return ex.respond_error(400, codes::kInvalidRequestBody, err->message);
  auto w = std::make_unique<PrepareWork>();
  w->reg = &reg;
  w->req = std::move(std::get<protocol::CommandRequest>(decoded));
  w->framing = framing_for(reg.ctx(), ex);
  if (reg.ctx().shutting_down) return ex.respond_error(503, codes::kRuntimeError, "execd is shutting down");
  std::string fingerprint = protocol::request_fingerprint(w->req);
  if (!w->req.id.empty()) {
    if (CommandRecord* existing = reg.find(w->req.id)) {
      // A retried start: the same request attaches to the run, a different
      // one is refused.
      if (existing->fingerprint != fingerprint)
        return ex.respond_error(409, "COMMAND_ID_CONFLICT",
                                "command id " + w->req.id + " is already used by a different request");
      auto reader = std::make_unique<ResumeReader>(ex, *existing, w->framing, 0, 0, /*attach=*/true);
      ResumeReader& r = *reader;
      ex.attach(std::move(reader));
      if (!existing->starting()) r.begin();
      return;
    }
  }
  // The id is reserved now, before anything that takes time.
  CommandRecord* rec = reg.create(w->req.id, w->req.command, w->req.background);
  rec->fingerprint = fingerprint;
  rec->cwd = w->req.cwd;
  rec->uid = w->req.uid;
  rec->gid = w->req.gid;
  rec->tty = w->req.tty;
  rec->stdin_open = w->req.stdin_open;
  w->id = rec->id;
  if (!needs_pool(reg.ctx(), w->req)) {
    // Nothing that blocks: prepare on the loop and save two thread hops.
    prepare(*w);
    return start_command(reg, &ex, *w);
  }
  await(ex, *w);
  pty::queue_job<PrepareWork>(reg.ctx().loop, std::move(w), prepare, after_prepare);
}

void respond_unknown_command(http::Exchange& ex, const std::string& id) {
  ex.respond_error(404, codes::kInvalidRequestBody, "command not found: " + id);
}

void handle_interrupt(CommandRegistry& reg, SessionRegistry& sessions, http::Exchange& ex) {
  const protocol::QueryParams& q = ex.query;
  const std::string* id = protocol::query_value(q, "id");
  if (!id || id->empty()) {
    ex.respond_error(400, codes::kMissingQuery, "missing query parameter 'id'");
    return;
  }
  CommandRecord* rec = reg.find(*id);
  if (!rec) {
    // Contract 4.5: the id may name a bash session; its run is stopped.
    switch (sessions.interrupt_run(*id)) {
      case InterruptResult::interrupted:
        ex.respond_empty(200);
        return;
      case InterruptResult::not_running:
        ex.respond_error(500, codes::kRuntimeError,
                           "error interrupting command. session " + *id + " is not running a command");
        return;
      case InterruptResult::not_found:
        respond_unknown_command(ex, *id);
        return;
    }
  }
  std::shared_ptr<pty::CommandCgroup> cg = rec->cgroup.lock();
  if ((!rec->cmd || !rec->cmd->running()) && cg && cg->population() > 0) {
    // The shell has exited; what it started (servers, `&` jobs) has not.
    cg->kill_all();
    ex.respond_empty(200);
    return;
  }
  if (!rec->cmd || !rec->cmd->running()) {
    ex.respond_error(500, codes::kRuntimeError,
                       "error interrupting command. command " + *id + " is not running");
    return;
  }
  // Returns at once; the command's own stream reports how it ended.
  rec->cmd->interrupt();
  ex.respond_empty(200);
}

void handle_status(CommandRegistry& reg, http::Exchange& ex, const std::string& id) {
  CommandRecord* rec = reg.find(id);
  if (!rec) {
    respond_unknown_command(ex, id);
    return;
  }
  ex.respond_json(200, rec->status_json());
}

struct LogRead : Awaitable {};

void handle_logs(CommandRegistry& reg, http::Exchange& ex, const std::string& id) {
  const protocol::QueryParams& q = ex.query;
  constexpr size_t kMaxLogRead = 4 << 20;
  CommandRecord* rec = reg.find(id);
  if (!rec) {
    respond_unknown_command(ex, id);
    return;
  }
  // As Go: anything that is not a base-10 int64 (overflow included) reads
  // from 0; a negative cursor is a failed seek.
  const std::string* raw = protocol::query_value(q, "cursor");
  std::optional<uint64_t> offset = pty::logs_cursor_offset(raw ? std::optional<std::string_view>(*raw) : std::nullopt);
  if (!offset)
    return ex.respond_error(400, codes::kInvalidRequestBody, "error seek file: negative cursor " + *raw);
  uint64_t cursor = *offset;
  bool truncated = rec->log->truncated();
  auto* waiting = new LogRead;
  await(ex, *waiting);
  rec->log->read(cursor, kMaxLogRead, [waiting, cursor, truncated](int err, std::string data) {
    std::unique_ptr<LogRead> done(waiting);
    http::Exchange* ex = done->exchange();
    if (!ex) return;
    if (err) return ex->respond_error(500, codes::kRuntimeError, std::string("error reading output: ") + uv_strerror(err));
    uint64_t next = cursor + data.size();
    std::vector<std::string> headers = {"EXECD-COMMANDS-TAIL-CURSOR: " + std::to_string(next)};
    if (truncated) headers.emplace_back("EXECD-COMMANDS-LOG-TRUNCATED: true");
    ex->respond(200, "text/plain; charset=utf-8", data, headers);
  });
}

// GET /command/{id}/stream?stdout=N&stderr=M: always exact framing (offsets
// are byte offsets of the streams).
void handle_stream(CommandRegistry& reg, http::Exchange& ex, const std::string& id) {
  CommandRecord* rec = reg.find(id);
  if (!rec) return respond_unknown_command(ex, id);
  uint64_t from[2] = {0, 0};
  const char* names[2] = {"stdout", "stderr"};
  for (int s = 0; s < 2; ++s) {
    const std::string* raw = protocol::query_value(ex.query, names[s]);
    if (!raw) continue;
    auto v = protocol::parse_offset(*raw);
    if (!v) return ex.respond_error(400, codes::kInvalidRequestBody, std::string(names[s]) + " must be a byte offset");
    if (rec->done() && *v > rec->result_bytes(s))
      return ex.respond_error(400, codes::kInvalidRequestBody,
                              std::string(names[s]) + " offset " + std::to_string(*v) + " is past the end (" +
                                  std::to_string(rec->result_bytes(s)) + " bytes)");
    from[s] = *v;
  }
  auto reader = std::make_unique<ResumeReader>(ex, *rec, protocol::Framing::exact, from[0], from[1], false);
  ResumeReader& r = *reader;
  ex.attach(std::move(reader));
  if (!rec->starting()) r.begin();
}

// POST /command/{id}/stdin[?offset=N][&eof=true], at head time: decide
// whether the body is wanted, and attach the Source that takes it.
void stdin_head(CommandRegistry& reg, http::Exchange& ex) {
  const std::string id = ex.params.get("id");
  auto refuse = [&ex](int status, std::string code, std::string message) {
    ex.on_complete = [status, code, message](http::Exchange& e) { e.respond_error(status, code, message); };
  };
  CommandRecord* rec = reg.find(id);
  if (!rec) return refuse(404, std::string(codes::kInvalidRequestBody), "command not found: " + id);
  if (!rec->stdin_open)
    return refuse(409, "STDIN_NOT_OPEN", "command " + id + " was not started with \"stdin\": true");
  std::optional<uint64_t> offset;
  if (const std::string* raw = protocol::query_value(ex.query, "offset")) {
    offset = protocol::parse_offset(*raw);
    if (!offset) return refuse(400, std::string(codes::kInvalidRequestBody), "offset must be a byte count");
  }
  const std::string* eof_raw = protocol::query_value(ex.query, "eof");
  bool eof = eof_raw && (*eof_raw == "true" || *eof_raw == "1");
  auto plan = protocol::plan_stdin_write(rec->stdin_accepted, offset);
  if (plan.gap)
    return refuse(409, "STDIN_OFFSET_GAP",
                  "offset " + std::to_string(*offset) + " is past the " + std::to_string(rec->stdin_accepted) +
                      " bytes accepted so far");
  if (rec->stdin_body) return refuse(409, "STDIN_BUSY", "another stdin write to " + id + " is in progress");
  if (!rec->stdin_writer || rec->stdin_eof) {
    // Closed already (eof, the command ended or closed it): a retry that
    // brings nothing new still learns the offset.
    const std::string* len = ex.header("content-length");
    bool empty_body = !len || *len == "0";
    if ((empty_body || plan.skip > 0) && rec->stdin_eof) {
      uint64_t accepted = rec->stdin_accepted;
      ex.on_complete = [accepted](http::Exchange& e) {
        e.respond_json(200, "{\"offset\":" + std::to_string(accepted) + "}");
      };
      return;
    }
    return refuse(409, "STDIN_CLOSED", "the stdin of command " + id + " is closed");
  }
  ex.attach(std::make_unique<StdinBody>(ex, *rec, plan.skip, eof, reg.ctx().config.stdin_timeout_ms));
}

void stdin_complete(http::Exchange& ex) {
  if (auto* body = dynamic_cast<StdinBody*>(ex.source())) body->complete();
}

}  // namespace

void interrupt_command(CommandRegistry& commands, SessionRegistry& sessions, http::Exchange& ex) {
  handle_interrupt(commands, sessions, ex);
}

void add_command_routes(RouteTable& routes, CommandRegistry& commands, SessionRegistry& sessions) {
  routes.add("POST", "/command", [&commands](http::Exchange& ex) { handle_run(commands, ex); });
  routes.add("DELETE", "/command",
             [&commands, &sessions](http::Exchange& ex) { handle_interrupt(commands, sessions, ex); });
  routes.add("GET", "/command/status/:id",
             [&commands](http::Exchange& ex) { handle_status(commands, ex, ex.params.get("id")); });
  routes.add("GET", "/command/:id/logs",
             [&commands](http::Exchange& ex) { handle_logs(commands, ex, ex.params.get("id")); });
  routes.add("GET", "/command/:id/stream",
             [&commands](http::Exchange& ex) { handle_stream(commands, ex, ex.params.get("id")); });
  // The latest run of a bash session (its record id is "<session>.<n>", also
  // in the run response's EXECD-RUN-ID header).
  routes.add("GET", "/session/:id/stream", [&commands, &sessions](http::Exchange& ex) {
    std::string run = sessions.latest_run(ex.params.get("id"));
    if (run.empty())
      return ex.respond_error(404, codes::kContextNotFound, "session " + ex.params.get("id") + " has no run to stream");
    handle_stream(commands, ex, run);
  });
  routes.add_streaming(
      "POST", "/command/:id/stdin", [&commands](http::Exchange& ex) { stdin_head(commands, ex); }, stdin_complete);
}

}  // namespace execd::api
