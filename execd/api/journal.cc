// execd/api/journal: see header.
#include "execd/api/journal.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>

#include "execd/api/awaiter.h"
#include "protocol/errors.h"
#include "protocol/resume.h"
#include "fs/paths.h"
#include "fs/small_file.h"
#include "pty/digest.h"
#include "fs/pool_job.h"

namespace execd::api {

namespace codes = protocol::codes;
using ojson = nlohmann::ordered_json;

namespace {
// Journals are bounded by --journal-max-bytes, not by a read limit.
std::string read_file(const std::string& path) { return fs::read_small_file(path, SIZE_MAX).value_or(std::string()); }
}  // namespace

Journal::Journal(const Context& ctx) : ctx_(ctx) {
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
  if (!lines.empty()) last = lines.back();
  else {
    // A fresh file after a rotation: the chain goes on from the old one.
    std::string old = read_file(rotated_path_);
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
  fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd_ < 0) spdlog::warn("cannot open the journal {}: {}; no journal kept", path_, strerror(errno));
}

Journal::~Journal() { close(); }

void Journal::close() {
  if (fd_ < 0) return;
  fsync(fd_);
  ::close(fd_);
  fd_ = -1;
}

std::vector<std::string> Journal::files() const { return {rotated_path_, path_}; }

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
  spdlog::info("journal rotated at seq {}", head_.seq);
}

// ---------------------------------------------------------------------------
// Reading: a threadpool job collects the lines after `after` from the files.

// Not in the anonymous namespace: JournalReader (declared in the header)
// holds one.
struct CollectJob {
  std::vector<std::string> files;
  uint64_t after = 0;
  size_t max_bytes = 1 << 20;
  uint64_t size_cap = 0;  // bytes of the last file to look at
  // results
  std::string text;
  uint64_t last = 0;
  JournalReader* reader = nullptr;  // null once the reader is gone
};

namespace {

void collect(CollectJob& job) {
  CollectJob* j = &job;
  j->last = j->after;
  bool started = false;
  for (size_t i = 0; i < j->files.size(); ++i) {
    std::string text = read_file(j->files[i]);
    if (i + 1 == j->files.size() && text.size() > j->size_cap) text.resize(j->size_cap);
    for (std::string_view line : protocol::split_lines(text)) {
      auto seq = protocol::journal_line_seq(line);
      if (!seq || *seq <= j->last) continue;
      // Contiguous after the first line given out (a reader whose position
      // rotated away starts at the oldest entry kept).
      if (started && *seq != j->last + 1) return;
      started = true;
      j->text.append(line);
      j->text.push_back('\n');
      j->last = *seq;
      if (j->text.size() >= j->max_bytes) return;
    }
  }
}

}  // namespace

class JournalReader final : public http::Source {
 public:
  JournalReader(http::Exchange& ex, Journal& j, uint64_t since, bool follow)
      : ex_(ex), journal_(j), last_(since), follow_(follow) {}
  ~JournalReader() override {
    journal_.unfollow(this);
    if (job_) job_->reader = nullptr;
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
    if (job_) job_->reader = nullptr;
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
    auto job = std::make_unique<CollectJob>();
    job->reader = this;
    job->files = journal_.files();
    job->after = last_;
    job->size_cap = journal_.current_size();
    job_ = job.get();
    fs::queue_job<CollectJob>(journal_.loop(), std::move(job), collect, [](CollectJob& j, int) {
      if (j.reader) j.reader->caught(j);
    });
  }

  void caught(CollectJob& j) {
    job_ = nullptr;
    last_ = j.last;
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
  CollectJob* job_ = nullptr;
  uint64_t last_tick_ms_ = 0;
};

void Journal::append(const ojson& body) { append(body, {}, {}); }

void Journal::append(const ojson& body, std::string_view raw_key, std::string_view raw_json) {
  if (fd_ < 0) return;
  uint64_t seq = head_.seq + 1;
  std::string_view prev = head_.seq ? std::string_view(head_.hash) : std::string_view(protocol::kJournalGenesis);
  std::string line = raw_key.empty() ? protocol::journal_line(seq, prev, body)
                                     : protocol::journal_line(seq, prev, body, raw_key, raw_json);
  if (size_ > 0 && size_ + line.size() + 1 > static_cast<uint64_t>(ctx_.config.journal_max_bytes)) {
    rotate();
    if (fd_ < 0) return;
  }
  std::string out = line + "\n";
  if (int err = fs::write_all(fd_, out)) {
    spdlog::warn("journal write failed: {}", strerror(err));
    // Keep the file a sequence of whole lines: cut what went out.
    if (ftruncate(fd_, static_cast<off_t>(size_)) != 0) {}
    return;
  }
  size_ += out.size();
  head_.seq = seq;
  head_.hash = protocol::sha256_hex(line);
  auto followers = followers_;  // a follower may unfollow while we walk
  for (JournalReader* r : followers)
    if (followers_.count(r)) r->on_entry(seq, out);
}

namespace {

struct VerifyJob : Awaitable {
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

bool query_true(const http::Exchange& ex, const char* name) {
  const std::string* v = protocol::query_value(ex.query, name);
  return v && (*v == "true" || *v == "1");
}

bool disabled(Journal& j, http::Exchange& ex) {
  if (j.enabled()) return false;
  ex.respond_error(404, codes::kNotFound, "the execution journal is disabled (--no-journal)");
  return true;
}

// POST /journal/events[?source=NAME]: one JSON object, an array of them,
// or NDJSON (Content-Type: application/x-ndjson). Each becomes an entry
// {"seq","prev","type":"harness","time","source","event":<as sent, minified>};
// all or none of one request are appended. The body is a buffered body
// (--max-body); each event at most --journal-event-max-bytes.
void handle_events(Journal& journal, const Context& ctx, http::Exchange& ex) {
  constexpr size_t kMaxEvents = 1000;
  if (disabled(journal, ex)) return;
  const std::string* type = ex.header("content-type");
  bool ndjson = type && type->find("ndjson") != std::string::npos;
  auto decoded = protocol::decode_journal_events(ex.request().body, ndjson,
                                                 static_cast<size_t>(ctx.config.journal_event_max_bytes), kMaxEvents);
  if (auto* err = std::get_if<protocol::JournalEventsError>(&decoded))
    return ex.respond_error(400, codes::kInvalidRequestBody, err->message);
  std::string source;
  if (const std::string* s = protocol::query_value(ex.query, "source")) source = *s;
  if (source.size() > 256) return ex.respond_error(400, codes::kInvalidRequestBody, "source is longer than 256 bytes");
  const auto& events = std::get<std::vector<std::string>>(decoded);
  uint64_t first = journal.head().seq + 1;
  for (const auto& raw : events) {
    ojson e;
    e["type"] = "harness";
    e["time"] = rfc3339_nano(unix_ns());
    if (!source.empty()) e["source"] = source;
    journal.append(e, "event", raw);
  }
  protocol::JournalHead head = journal.head();
  if (head.seq < first + events.size() - 1)
    return ex.respond_error(500, codes::kRuntimeError, "the journal could not be written (see execd's log)");
  ojson out;
  out["appended"] = events.size();
  out["first_seq"] = first;
  out["last_seq"] = head.seq;
  out["head"] = head.hash;
  ex.respond_json(200, out.dump());
}

}  // namespace

void add_journal_routes(RouteTable& routes, Journal& journal) {
  routes.add("POST", "/journal/events",
             [&journal](http::Exchange& ex) { handle_events(journal, journal.context(), ex); });
  routes.add("GET", "/journal", [&journal](http::Exchange& ex) {
    if (disabled(journal, ex)) return;
    uint64_t since = 0;
    if (const std::string* raw = protocol::query_value(ex.query, "since")) {
      auto v = protocol::parse_offset(*raw);
      if (!v) return ex.respond_error(400, codes::kInvalidRequestBody, "since must be a non-negative integer");
      since = *v;
    }
    auto reader = std::make_unique<JournalReader>(ex, journal, since, query_true(ex, "follow"));
    JournalReader& r = *reader;
    ex.attach(std::move(reader));
    r.start();
  });
  routes.add("GET", "/journal/verify", [&journal](http::Exchange& ex) {
    if (disabled(journal, ex)) return;
    auto job = std::make_unique<VerifyJob>();
    job->files = journal.files();
    job->size_cap = journal.current_size();
    job->head = journal.head();
    await(ex, *job);
    fs::queue_job<VerifyJob>(journal.loop(), std::move(job), verify, [](VerifyJob& j, int) {
      if (http::Exchange* ex = j.exchange()) ex->respond_json(200, j.answer);
    });
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

void journal_file_change(Journal& journal, std::string op, std::vector<std::string> paths, ojson extra) {
  if (!journal.enabled() || paths.empty()) return;
  auto job =
      std::make_unique<FileChangeJob>(FileChangeJob{&journal, std::move(op), std::move(paths), std::move(extra)});
  fs::queue_job<FileChangeJob>(journal.loop(), std::move(job), describe_files, [](FileChangeJob& j, int) {
    if (!j.journal->enabled()) return;
    ojson e;
    e["type"] = "file";
    e["time"] = rfc3339_nano(unix_ns());
    e["op"] = j.op;
    for (auto it = j.extra.begin(); it != j.extra.end(); ++it) e[it.key()] = it.value();
    e["files"] = j.files;
    j.journal->append(e);
  });
}

}  // namespace execd::api
