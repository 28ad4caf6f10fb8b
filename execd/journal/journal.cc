// execd/journal/journal: see header.
#include "execd/journal/journal.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>

#include "execd/clock.h"
#include "execd/http/awaiter.h"
#include "execd/journal/entries.h"
#include "execd/link.h"
#include "execd/limits.h"
#include "protocol/errors.h"
#include "protocol/resume.h"
#include "fs/paths.h"
#include "fs/small_file.h"
#include "pty/digest.h"
#include "pty/namespaces.h"
#include "fs/pool_job.h"

namespace execd::journal {

namespace codes = protocol::codes;
using ojson = nlohmann::ordered_json;

namespace {
// Journals are bounded by --journal-max-bytes, not by a read limit.
std::string read_file(const std::string& path) { return fs::read_small_file(path, SIZE_MAX).value_or(std::string()); }
}  // namespace

namespace {
constexpr uint64_t kMarkEvery = 64 << 10;

// Offsets of entries every kMarkEvery bytes of `text` (whole lines).
template <class Fn>
void mark_lines(std::string_view text, Fn mark) {
  uint64_t offset = 0, last = 0;
  bool any = false;
  for (std::string_view line : protocol::split_lines(text)) {
    if (!any || offset - last >= kMarkEvery) {
      if (auto seq = protocol::journal_line_seq(line)) {
        mark(*seq, offset);
        last = offset;
        any = true;
      }
    }
    offset += line.size() + 1;
  }
}
}  // namespace

Journal::Journal(const Context& ctx, WorkGate& gate) : ctx_(ctx), gate_(gate) {
  path_ = ctx.config.state_dir + "/journal.jsonl";
  rotated_path_ = ctx.config.state_dir + "/journal.1.jsonl";
  if (!ctx.config.journal) return;
  // Start-up, before the loop serves anyone: reading synchronously is fine.
  std::string text = read_file(path_);
  bool torn = false;
  auto lines = protocol::split_lines(text, &torn);
  if (torn) {
    size_t keep = text.size() - lines.back().size();
    spdlog::warn("journal {}: cutting a torn last line ({} bytes) left by a crash", path_, lines.back().size());
    if (truncate(path_.c_str(), static_cast<off_t>(keep)) != 0)
      spdlog::warn("journal {}: cannot cut the torn line: {}", path_, strerror(errno));
    lines.pop_back();
    text.resize(keep);
  }
  std::string_view last;
  mark_lines(text, [&](uint64_t seq, uint64_t off) { marks_.push_back({seq, off}); });
  std::string old = read_file(rotated_path_);
  mark_lines(old, [&](uint64_t seq, uint64_t off) { rotated_marks_.push_back({seq, off}); });
  if (!lines.empty()) last = lines.back();
  else {
    // A fresh file after a rotation: the chain goes on from the old one.
    auto old_lines = protocol::split_lines(old);
    if (!old_lines.empty()) {
      head_.seq = protocol::journal_line_seq(old_lines.back()).value_or(0);
      head_.hash = protocol::sha256_hex(old_lines.back());
    }
  }
  if (!last.empty()) {
    auto seq = protocol::journal_line_seq(last);
    if (!seq) spdlog::warn("journal {}: the last line is not a journal entry; GET /journal/verify will say so", path_);
    head_.seq = seq.value_or(lines.size());
    head_.hash = protocol::sha256_hex(last);
  }
  size_ = text.size();
  chain_ = head_;
  fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    spdlog::warn("cannot open the journal {}: {}; no journal kept", path_, strerror(errno));
    return;
  }
  uv_timer_init(ctx.loop, &retry_timer_);
  retry_timer_.data = this;
  timer_open_ = true;
}

Journal::~Journal() { close(); }

void Journal::close() {
  if (timer_open_) {
    timer_open_ = false;
    uv_close(reinterpret_cast<uv_handle_t*>(&retry_timer_), nullptr);
  }
  if (!unwritten_.empty() && !write_unwritten())
    spdlog::error("journal: {} entries could not be written (the disk refused them); they are lost",
                  unwritten_.size());
  if (fd_ < 0) return;
  fsync(fd_);
  ::close(fd_);
  fd_ = -1;
}

std::vector<std::string> Journal::files() const { return {rotated_path_, path_}; }

void Journal::mark(uint64_t seq, uint64_t offset) {
  if (marks_.empty() || offset - marks_.back().offset >= kMarkEvery) marks_.push_back({seq, offset});
}

std::vector<Journal::Start> Journal::starts(uint64_t after) const {
  auto from = [after](const std::vector<Mark>& marks) {
    uint64_t off = 0;
    for (const Mark& m : marks) {
      if (m.seq > after + 1) break;
      off = m.offset;
    }
    return off;
  };
  std::vector<Start> out;
  // The rotated file only holds entries before the current one's first.
  if (marks_.empty() || after + 1 < marks_.front().seq) out.push_back({rotated_path_, from(rotated_marks_)});
  out.push_back({path_, from(marks_)});
  return out;
}

void Journal::rotate() {
  // The full file is flushed and closed on the pool: an fsync of up to
  // --journal-max-bytes on the loop held every client for as long as the
  // disk took. Its data is in the page cache for readers meanwhile.
  struct FlushJob {
    int fd;
  };
  fs::queue_job<FlushJob>(
      ctx_.loop, std::make_unique<FlushJob>(FlushJob{fd_}),
      [](FlushJob& j) {
        fsync(j.fd);
        ::close(j.fd);
      },
      [](FlushJob&, int) {});
  fd_ = -1;
  if (rename(path_.c_str(), rotated_path_.c_str()) != 0)
    spdlog::warn("journal rotation: cannot rename {}: {}", path_, strerror(errno));
  fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_TRUNC | O_CLOEXEC, 0600);
  if (fd_ < 0) spdlog::warn("journal rotation: cannot open {}: {}; no journal kept", path_, strerror(errno));
  size_ = 0;
  rotated_marks_ = std::move(marks_);
  marks_.clear();
  spdlog::info("journal rotated at seq {}", head_.seq);
}

// ---------------------------------------------------------------------------
// Reading: a threadpool job collects the lines after `after` from the files.

class JournalReader;

// A catch-up: at most max_bytes of lines after `after`, read from where
// that entry lies (the journal's marks), never whole files. It goes through
// the file gate; its reader may go meanwhile (the link is then empty, and a
// job still waiting at the gate is withdrawn).
struct CollectJob {
  WorkGate::Ticket work;
  Link<JournalReader> reader;
  std::vector<Journal::Start> starts;
  uint64_t after = 0;
  size_t max_bytes = 64 << 10;
  uint64_t size_cap = 0;  // bytes of the last file to look at
  uint64_t head = 0;      // the file's last entry when the job was queued (size_cap ends it)
  // results
  std::string text;
  uint64_t last = 0;
};

namespace {

void collect(CollectJob& job) {
  CollectJob* j = &job;
  j->last = j->after;
  bool started = false;
  constexpr size_t kChunk = 64 << 10;
  std::string buf, carry;
  for (size_t i = 0; i < j->starts.size(); ++i) {
    const bool current = i + 1 == j->starts.size();
    int fd = ::open(j->starts[i].path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    uint64_t at = j->starts[i].offset;
    carry.clear();
    bool done = false;
    while (!done) {
      size_t want = kChunk;
      if (current) {
        if (at >= j->size_cap) break;
        want = static_cast<size_t>(std::min<uint64_t>(kChunk, j->size_cap - at));
      }
      buf.resize(want);
      ssize_t n = ::pread(fd, buf.data(), want, static_cast<off_t>(at));
      if (n <= 0) break;
      at += static_cast<uint64_t>(n);
      carry.append(buf.data(), static_cast<size_t>(n));
      size_t line_start = 0;
      for (size_t nl; (nl = carry.find('\n', line_start)) != std::string::npos; line_start = nl + 1) {
        std::string_view line(carry.data() + line_start, nl - line_start);
        auto seq = protocol::journal_line_seq(line);
        if (!seq || *seq <= j->last) continue;
        // Contiguous after the first line given out (a reader whose position
        // rotated away starts at the oldest entry kept).
        if (started && *seq != j->last + 1) {
          ::close(fd);
          return;
        }
        started = true;
        j->text.append(line);
        j->text.push_back('\n');
        j->last = *seq;
        if (j->text.size() >= j->max_bytes) {
          done = true;
          break;
        }
      }
      carry.erase(0, line_start);
    }
    ::close(fd);
    if (done) return;
  }
}

}  // namespace

class JournalReader final : public http::Source {
 public:
  JournalReader(http::Exchange& ex, Journal& j, uint64_t since, bool follow)
      : ex_(ex), journal_(j), last_(since), follow_(follow) {
    if (follow_) journal_.count_follower(+1);
  }
  ~JournalReader() override {
    journal_.unfollow(this);
    if (follow_) journal_.count_follower(-1);
    withdraw();
  }

  void start() {
    ex_.begin_chunked(200, {"Content-Type: application/x-ndjson", "Cache-Control: no-cache", "X-Accel-Buffering: no"});
    catch_up();
  }

  void on_entry(uint64_t seq, const std::string& line) {
    if (mode_ != Mode::live || seq != last_ + 1) return;
    last_ = seq;
    if (!ex_.send(std::string_view(line))) {
      journal_.unfollow(this);
      mode_ = Mode::waiting;
    }
  }

  void proceed() override {
    if (mode_ == Mode::waiting) catch_up();
  }
  void stop() override {
    stopped_ = true;
    journal_.unfollow(this);
    withdraw();
  }
  void tick(uint64_t now_ms) override {
    // Keeps idle proxies from timing a quiet follow out: an empty line.
    if (mode_ == Mode::live && now_ms - last_tick_ms_ >= 15000) {
      last_tick_ms_ = now_ms;
      ex_.send(std::string_view("\n"));
    }
  }

 private:
  enum class Mode { reading, waiting, live };
  void catch_up() {
    mode_ = Mode::reading;
    auto* job = new CollectJob;
    job->work.req.data = job;
    link(*job, job->reader, *this, job_);
    job->starts = journal_.starts(last_);
    job->after = last_;
    job->size_cap = journal_.current_size();
    job->head = journal_.head().seq;
    journal_.gate().queue(
        journal_.loop(), job->work, [](uv_work_t* w) { collect(*static_cast<CollectJob*>(w->data)); },
        [](uv_work_t* w, int status) {
          std::unique_ptr<CollectJob> j(static_cast<CollectJob*>(w->data));
          JournalReader* r = j->reader.get();
          if (!r || status != 0) return;
          j->reader.cut();
          r->caught(*j);
        });
  }

  // Gone: a catch-up still waiting at the gate never takes a thread.
  void withdraw() {
    if (CollectJob* j = job_.get()) {
      job_.cut();
      j->work.gate->cancel(j->work);
    }
  }

  void caught(CollectJob& j) {
    uint64_t before = last_;
    last_ = j.last;
    // Nothing new where entries should be (a file removed by hand): go on
    // from the head the job looked up to rather than look again and again.
    // Entries written since are in the file past its size_cap: the next
    // catch-up reads them.
    if (last_ == before && last_ < j.head) last_ = j.head;
    bool more = j.text.empty() || ex_.send(std::move(j.text));
    bool at_head = last_ >= journal_.head().seq;
    if (!at_head) {
      if (more) catch_up();
      else mode_ = Mode::waiting;
      return;
    }
    if (!follow_) return ex_.end();
    if (!more) {
      mode_ = Mode::waiting;
      return;
    }
    mode_ = Mode::live;
    journal_.follow(this);
  }

  http::Exchange& ex_;
  Journal& journal_;
  uint64_t last_;
  bool follow_;
  bool stopped_ = false;
  Mode mode_ = Mode::reading;
  Link<CollectJob> job_;  // the catch-up out
  uint64_t last_tick_ms_ = 0;
};

void Journal::append(const ojson& body) { append(body, {}, {}); }

void Journal::append(const ojson& body, std::string_view raw_key, std::string_view raw_json) {
  if (fd_ < 0) return;
  uint64_t seq = chain_.seq + 1;
  std::string_view prev = chain_.seq ? std::string_view(chain_.hash) : std::string_view(protocol::kJournalGenesis);
  std::string line = raw_key.empty() ? protocol::journal_line(seq, prev, body)
                                     : protocol::journal_line(seq, prev, body, raw_key, raw_json);
  chain_.seq = seq;
  chain_.hash = protocol::sha256_hex(line);
  line += '\n';
  unwritten_.push_back(Unwritten{std::move(line), chain_});
  if (unwritten_.size() == 1 && write_unwritten()) return;
  // The disk refused it (or an earlier one waits): again in a second.
  if (timer_open_ && !uv_is_active(reinterpret_cast<uv_handle_t*>(&retry_timer_)))
    uv_timer_start(
        &retry_timer_,
        [](uv_timer_t* t) {
          auto* j = static_cast<Journal*>(t->data);
          if (j->write_unwritten()) uv_timer_stop(t);
        },
        1000, 1000);
}

bool Journal::write_unwritten() {
  while (!unwritten_.empty() && fd_ >= 0) {
    const std::string& out = unwritten_.front().text;
    if (size_ > 0 && size_ + out.size() > static_cast<uint64_t>(ctx_.config.journal_max_bytes)) {
      rotate();
      if (fd_ < 0) return false;
    }
    if (int err = fs::write_all(fd_, out)) {
      if (err != last_error_)
        spdlog::warn("journal write failed: {}; {} entries wait to be written", strerror(err), unwritten_.size());
      last_error_ = err;
      // Keep the file a sequence of whole lines: cut what went out.
      if (ftruncate(fd_, static_cast<off_t>(size_)) != 0) {}
      return false;
    }
    if (last_error_) {
      spdlog::info("journal: writing again after {}", strerror(last_error_));
      last_error_ = 0;
    }
    // Its seq and hash are the chain's when it was appended.
    mark(unwritten_.front().head.seq, size_);
    size_ += out.size();
    head_ = std::move(unwritten_.front().head);
    std::string entry = std::move(unwritten_.front().text);
    unwritten_.pop_front();
    auto followers = followers_;  // a follower may unfollow while we walk
    for (JournalReader* r : followers)
      if (followers_.count(r)) r->on_entry(head_.seq, entry);
  }
  return unwritten_.empty();
}

namespace {

struct VerifyJob : http::Awaitable {
  std::vector<std::string> files;
  uint64_t size_cap = 0;
  protocol::JournalHead head;
  std::string answer;
};

void verify(VerifyJob& job) {
  VerifyJob* j = &job;
  std::vector<std::string> texts;
  for (size_t i = 0; i < j->files.size(); ++i) {
    texts.push_back(read_file(j->files[i]));
    if (i + 1 == j->files.size() && texts.back().size() > j->size_cap) texts.back().resize(j->size_cap);
  }
  std::vector<std::string_view> lines;
  for (const std::string& t : texts)
    for (std::string_view l : protocol::split_lines(t)) lines.push_back(l);
  bool anchored = !lines.empty() && protocol::journal_line_seq(lines.front()) == uint64_t(1);
  std::optional<protocol::JournalHead> head;
  if (j->head.seq) head = j->head;
  protocol::JournalVerdict v = protocol::verify_journal(lines, anchored || lines.empty(), head);
  ojson out;
  out["ok"] = v.ok;
  if (v.ok) {
    out["entries"] = v.entries;
    out["first_seq"] = v.first_seq;
    out["last_seq"] = j->head.seq;
    out["head"] = j->head.hash;
  } else {
    out["broken_at"] = v.broken_at;
    out["reason"] = v.reason;
  }
  j->answer = out.dump();
}

}  // namespace

void serve_journal(http::Exchange& ex, Journal& journal, uint64_t since, bool follow) {
  auto reader = std::make_unique<JournalReader>(ex, journal, since, follow);
  JournalReader& r = *reader;
  ex.attach(std::move(reader));
  r.start();
}

void verify_journal(http::Exchange& ex, Journal& journal) {
  auto job = std::make_unique<VerifyJob>();
  job->files = journal.files();
  job->size_cap = journal.current_size();
  job->head = journal.head();
  http::await(ex, *job);
  fs::queue_job<VerifyJob>(journal.loop(), std::move(job), verify, [](VerifyJob& j, int) {
    if (http::Exchange* ex = j.exchange()) ex->respond_json(200, j.answer);
  });
}

// ---------------------------------------------------------------------------
// File changes

namespace {
struct FileChangeJob {
  Journal* journal;
  std::string op;
  std::vector<std::string> paths;
  ojson extra;
  std::shared_ptr<const pty::MountNamespace> mount;
  ojson files = ojson::array();
};

void describe_files(FileChangeJob& job) {
  FileChangeJob* j = &job;
  for (const std::string& given : j->paths) {
    ojson f;
    // As the file operations resolve it ($VARs, relative paths).
    auto resolved = fs::expand_path_abs(given, fs::process_env_lookup());
    std::string p = resolved ? resolved.value() : given;
    f["path"] = p;
    struct stat st;
    if (lstat(p.c_str(), &st) != 0) {
      f["exists"] = false;
      j->files.push_back(f);
      continue;
    }
    f["exists"] = true;
    char mode[8];
    snprintf(mode, sizeof mode, "%o", st.st_mode & 07777);
    f["mode"] = mode;
    f["size"] = static_cast<uint64_t>(st.st_size);
    if (S_ISREG(st.st_mode)) {
      int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        pty::OutputDigest d;
        std::vector<uint8_t> buf(1 << 16);
        ssize_t n;
        while ((n = read(fd, buf.data(), buf.size())) > 0) d.update(buf.data(), static_cast<size_t>(n));
        ::close(fd);
        f["sha256"] = d.finish_hex();
      }
    } else {
      f["kind"] = S_ISDIR(st.st_mode) ? "directory" : S_ISLNK(st.st_mode) ? "symlink" : "other";
    }
    j->files.push_back(f);
  }
}
}  // namespace

void journal_file_change(Journal& journal, std::string op, std::vector<std::string> paths, ojson extra,
                         std::shared_ptr<const pty::MountNamespace> mount) {
  if (!journal.enabled() || paths.empty()) return;
  auto job = std::make_unique<FileChangeJob>(
      FileChangeJob{&journal, std::move(op), std::move(paths), std::move(extra), std::move(mount)});
  auto describe = [](FileChangeJob& j) {
    pty::MountScope scope(j.mount.get());
    if (!scope.error()) describe_files(j);
  };
  fs::queue_job<FileChangeJob>(journal.loop(), std::move(job), describe, [](FileChangeJob& j, int) {
    if (!j.journal->enabled()) return;
    j.journal->append(journal::file_entry(j.op, j.extra, std::move(j.files)));
  });
}

}  // namespace execd::journal
