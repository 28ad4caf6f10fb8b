// execd/api/download: see header.
#include "execd/api/download.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <optional>

#include "execd/api/api.h"
#include "execd/http/awaiter.h"
#include "execd/api/envd/files.h"
#include "execd/runners/command_spawn.h"
#include "fs/entries.h"
#include "execd/api/file_jobs.h"
#include "execd/work_gate.h"
#include "execd/http/connection.h"
#include "fs/expand.h"
#include "fs/line_range.h"
#include "protocol/query_values.h"
#include "fs/paths.h"
#include "protocol/errors.h"
#include "protocol/range.h"

namespace execd::api {

namespace codes = protocol::codes;
using http::Exchange;

namespace {

// Read ahead this much of the file on the pool before the loop sends it.
constexpr uint64_t kWindowBytes = 32ull << 20;

bool is_attr_char(unsigned char c) {
  // RFC 8187 attr-char
  return isalnum(c) || std::string_view("!#$&+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

}  // namespace

std::string content_disposition(std::string_view name) {
  bool plain = !name.empty();
  for (unsigned char c : name)
    if (c < 0x20 || c >= 0x7f) plain = false;
  std::string out = "attachment; filename=\"";
  if (plain) {
    for (char c : name) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
    return out;
  }
  static const char* hex = "0123456789ABCDEF";
  std::string pct;
  for (unsigned char c : name) {
    if (is_attr_char(c)) {
      pct += static_cast<char>(c);
    } else {
      pct += '%';
      pct += hex[c >> 4];
      pct += hex[c & 15];
    }
  }
  out += pct;
  out += "\"; filename*=UTF-8''";
  out += pct;
  return out;
}

std::string http_date(time_t t) {
  struct tm tm {};
  gmtime_r(&t, &tm);
  static const char* days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static const char* months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                 "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  char buf[64];
  snprintf(buf, sizeof buf, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday % 7], tm.tm_mday,
           months[tm.tm_mon % 12], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
  return buf;
}

namespace {

// ---- step 1 (pool): open, validate, build the head ---------------------------

struct Prepared {
  int fd = -1;
  uint64_t offset = 0, length = 0;
  int status = 200;
  std::vector<std::string> headers;
};

struct OpenWork : http::Awaitable {
  WorkGate::Ticket work;
  std::string path;
  std::optional<std::string> e2b_user;  // E2B: `path` against this user's home, no variables
  std::optional<std::string> range;
  // results
  std::optional<FileReply> error;
  Prepared prepared;
};

void open_for_download(OpenWork& w) {
  fs::Result<std::string> expanded = std::string();
  if (w.e2b_user) {
    runners::UserIds user;
    if (!runners::lookup_user(*w.e2b_user, user)) {
      w.error = FileReply::error(401, codes::kUnauthorized, "error looking up user '" + *w.e2b_user + "': unknown user");
      return;
    }
    expanded = fs::resolve_user_path(w.path, user.home);
  } else {
    expanded = fs::expand_path(w.path, fs::process_env_lookup());
  }
  if (!expanded) {
    w.error = FileReply::from(expanded.error());
    return;
  }
  const std::string& path = expanded.value();
  // O_NONBLOCK: opening a FIFO must not hang a pool thread.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    int err = errno;
    fs::Error e = fs::errno_error(err, "open " + path);
    if (err == ENOENT) e.message = "file not found: " + path;
    w.error = FileReply::from(e);
    return;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    w.error = FileReply::from(fs::errno_error(errno, "stat " + path));
    close(fd);
    return;
  }
  if (!S_ISREG(st.st_mode)) {
    w.error = FileReply::error(400, codes::kInvalidRequestBody,
                               (S_ISDIR(st.st_mode) ? "path is a directory: " : "path is not a regular file: ") + path);
    close(fd);
    return;
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  auto range = protocol::parse_range_header(
      w.range ? std::optional<std::string_view>(*w.range) : std::nullopt, size);
  std::string unsatisfied = "Content-Range: bytes */" + std::to_string(size);
  if (range.outcome == protocol::RangeOutcome::malformed) {
    w.error = FileReply::error(416, codes::kUnknown, "invalid Range header: " + *w.range);
    w.error->headers.push_back(unsatisfied);
    close(fd);
    return;
  }
  if (range.outcome == protocol::RangeOutcome::unsatisfiable) {
    w.error = FileReply::error(416, codes::kRangeNotSatisfiable,
                               "range " + *w.range + " does not overlap the file (" + std::to_string(size) + " bytes)");
    w.error->headers.push_back(unsatisfied);
    close(fd);
    return;
  }

  std::vector<std::string> headers = {"Content-Type: application/octet-stream",
                                      "Content-Disposition: " + content_disposition(fs::base_name(fs::clean_path(path))),
                                      "Accept-Ranges: bytes", "Last-Modified: " + http_date(st.st_mtime)};
  int status = 200;
  Prepared& p = w.prepared;
  if (range.outcome == protocol::RangeOutcome::satisfiable) {
    status = 206;
    p.offset = range.first;
    p.length = range.length();
    headers.push_back("Content-Range: bytes " + std::to_string(range.first) + "-" + std::to_string(range.last) + "/" +
                      std::to_string(size));
  } else {
    p.offset = 0;
    p.length = size;
  }
  headers.push_back("Content-Length: " + std::to_string(p.length));
  p.status = status;
  p.headers = std::move(headers);
  p.fd = fd;
}

// ---- step 2 (loop, with pool read-ahead): the body through the write queue --

class FileSender;

struct ReadAhead {
  WorkGate::Ticket work;
  http::SharedFile file;
  uint64_t offset = 0, length = 0;
  Link<FileSender> sender;
};

class FileSender final : public http::Source {
 public:
  FileSender(Exchange& ex, WorkGate& gate, uv_loop_t* loop, http::SharedFile file, uint64_t offset, uint64_t length)
      : ex_(ex), gate_(gate), loop_(loop), file_(std::move(file)), queued_(offset), prefetched_(offset), end_(offset + length) {}

  void start() { feed(); }
  void proceed() override {
    blocked_ = false;
    feed();
  }
  Link<ReadAhead> job;

  void read_ahead_done(uint64_t end) {
    prefetched_ = end;
    feed();
  }

 private:
  void feed() {
    while (queued_ < prefetched_ && !blocked_) {
      uint64_t n = prefetched_ - queued_;
      blocked_ = !ex_.send_file(file_, queued_, n);
      queued_ += n;
    }
    if (queued_ == end_) {
      ex_.end();
      return;
    }
    if (job || ex_.peer_gone() || prefetched_ - queued_ >= kWindowBytes || prefetched_ >= end_) return;
    auto* r = new ReadAhead;
    r->work.req.data = r;
    r->file = file_;
    r->offset = prefetched_;
    r->length = std::min(kWindowBytes, end_ - prefetched_);
    link(*r, r->sender, *this, job);
    int rc = gate_.queue(
        loop_, r->work,
        [](uv_work_t* w) {
          auto* r = static_cast<ReadAhead*>(w->data);
          // Pulls the window into the page cache so that sendfile on the loop
          // never waits for the disk.
          ::readahead(r->file->fd, static_cast<off64_t>(r->offset), static_cast<size_t>(r->length));
        },
        [](uv_work_t* w, int) {
          std::unique_ptr<ReadAhead> r(static_cast<ReadAhead*>(w->data));
          if (FileSender* s = r->sender.get()) {
            r->sender.cut();
            s->read_ahead_done(r->offset + r->length);
          }
        });
    if (rc != 0) {
      delete r;
      ex_.connection().close();  // the head is out: cutting the connection is the honest failure
    }
  }

  Exchange& ex_;
  WorkGate& gate_;
  uv_loop_t* loop_;
  http::SharedFile file_;
  uint64_t queued_, prefetched_, end_;
  bool blocked_ = false;
};

void after_open(uv_work_t* work, int status) {
  std::unique_ptr<OpenWork> w(static_cast<OpenWork*>(work->data));
  Exchange* ex = w->exchange();
  auto file = w->prepared.fd >= 0 ? std::make_shared<const http::OpenFile>(w->prepared.fd) : nullptr;
  if (!ex) return;  // the client left; the file closes with `file`
  if (status != 0)
    return ex->respond_error(500, codes::kRuntimeError, std::string("download: ") + uv_strerror(status));
  if (w->error) return send_reply(*ex, *w->error);
  Prepared& p = w->prepared;
  ex->begin_sized(p.status, std::move(p.headers));
  auto sender = std::make_unique<FileSender>(*ex, *w->work.gate, work->loop, std::move(file), p.offset, p.length);
  FileSender* s = sender.get();
  ex->attach(std::move(sender));
  s->start();
}

// ---- line-based reads (?offset=&limit=): a chunked text/plain body ----------
// The reader does blocking reads, so each chunk is read by a pool job; the
// reader travels with the job and comes back to the sender if it is still
// there (else the job frees it).

class LineSender;

struct LineJob {
  WorkGate::Ticket work;
  std::unique_ptr<fs::LineRangeReader> reader;
  std::string chunk;
  std::optional<fs::Error> error;
  Link<LineSender> sender;
};

class LineSender final : public http::Source {
 public:
  static constexpr size_t kChunk = 256 * 1024;
  LineSender(Exchange& ex, WorkGate& gate, uv_loop_t* loop, std::unique_ptr<fs::LineRangeReader> reader)
      : ex_(ex), gate_(gate), loop_(loop), reader_(std::move(reader)) {}
  Link<LineJob> job;

  void read_next() {
    if (job || !reader_) return;
    auto* j = new LineJob;
    j->work.req.data = j;
    j->reader = std::move(reader_);
    link(*j, j->sender, *this, job);
    int rc = gate_.queue(
        loop_, j->work,
        [](uv_work_t* w) {
          auto* j = static_cast<LineJob*>(w->data);
          j->chunk.resize(kChunk);
          auto n = j->reader->next_chunk(j->chunk.data(), j->chunk.size());
          if (!n) {
            j->error = n.error();
            j->chunk.clear();
          } else {
            j->chunk.resize(n.value());
          }
        },
        [](uv_work_t* w, int) {
          std::unique_ptr<LineJob> j(static_cast<LineJob*>(w->data));
          if (LineSender* s = j->sender.get()) {
            j->sender.cut();
            s->chunk_read(*j);
          }
        });
    if (rc != 0) {
      delete j;
      ex_.connection().close();
    }
  }
  void proceed() override { read_next(); }

 private:
  void chunk_read(LineJob& j) {
    reader_ = std::move(j.reader);
    if (j.error) {
      // The head is out: ending the connection early is the honest failure.
      spdlog::warn("line read aborted: {}", j.error->message);
      return ex_.connection().close();
    }
    if (j.chunk.empty()) return ex_.end();
    if (ex_.send(std::move(j.chunk))) read_next();
  }

  Exchange& ex_;
  WorkGate& gate_;
  uv_loop_t* loop_;
  std::unique_ptr<fs::LineRangeReader> reader_;
};

struct LineOpen : http::Awaitable {
  WorkGate::Ticket work;
  std::string path;
  protocol::LineRangeParams params;
  std::unique_ptr<fs::LineRangeReader> reader;
  std::optional<fs::Error> error;
};

void handle_line_download(FileService& svc, Exchange& ex, const std::string& path, protocol::LineRangeParams params) {
  auto* w = new LineOpen;
  w->work.req.data = w;
  w->path = path;
  w->params = params;
  int rc = svc.queue(
      w->work,
      [](uv_work_t* work) {
        auto* w = static_cast<LineOpen*>(work->data);
        auto expanded = fs::expand_path(w->path, fs::process_env_lookup());
        if (!expanded) return void(w->error = expanded.error());
        w->reader = std::make_unique<fs::LineRangeReader>();
        if (auto st = w->reader->open(expanded.value(), w->params.offset, w->params.limit); !st)
          w->error = st.error();
      },
      [](uv_work_t* work, int status) {
        std::unique_ptr<LineOpen> w(static_cast<LineOpen*>(work->data));
        Exchange* ex = w->exchange();
        if (!ex) return;
        if (status != 0)
          return ex->respond_error(500, codes::kRuntimeError, std::string("download: ") + uv_strerror(status));
        if (w->error) return send_reply(*ex, FileReply::from(*w->error));
        ex->begin_chunked(200, {"Content-Type: text/plain; charset=utf-8"});
        auto sender = std::make_unique<LineSender>(*ex, *w->work.gate, work->loop, std::move(w->reader));
        LineSender* s = sender.get();
        ex->attach(std::move(sender));
        s->read_next();
      });
  if (rc != 0) {
    delete w;
    return ex.respond_error(500, codes::kRuntimeError, std::string("cannot queue work: ") + uv_strerror(rc));
  }
  http::await(ex, *w);
}

std::optional<std::string_view> optional_query(const Exchange& ex, std::string_view name) {
  const std::string* v = protocol::query_value(ex.query, name);
  return v ? std::optional<std::string_view>(*v) : std::nullopt;
}

void queue_open(FileService& svc, Exchange& ex, std::unique_ptr<OpenWork> owned) {
  OpenWork* w = owned.release();
  w->work.req.data = w;
  if (const std::string* range = ex.header("range")) w->range = *range;
  int rc = svc.gate.queue(
      svc.ctx.loop, w->work, [](uv_work_t* work) { open_for_download(*static_cast<OpenWork*>(work->data)); }, after_open);
  if (rc != 0) {
    delete w;
    return ex.respond_error(500, codes::kRuntimeError, std::string("cannot queue work: ") + uv_strerror(rc));
  }
  http::await(ex, *w);
}

void handle_download(FileService& svc, Exchange& ex) {
  const std::string* path = protocol::query_value(ex.query, "path");
  if (!path) return ex.respond_error(400, codes::kMissingQuery, "missing query parameter 'path'");
  const std::string* range_header = ex.header("range");
  std::string error;
  auto lines = protocol::parse_line_range_params(
      optional_query(ex, "offset"), optional_query(ex, "limit"),
      range_header ? std::optional<std::string_view>(*range_header) : std::nullopt, error);
  if (!lines) return send_reply(ex, FileReply::from(fs::Error{fs::ErrorKind::bad_request, error}));
  if (lines->requested) return handle_line_download(svc, ex, *path, *lines);
  auto* w = new OpenWork;
  w->work.req.data = w;
  w->path = *path;
  if (const std::string* range = ex.header("range")) w->range = *range;
  int rc = svc.queue(
      w->work, [](uv_work_t* work) { open_for_download(*static_cast<OpenWork*>(work->data)); }, after_open);
  if (rc != 0) {
    delete w;
    return ex.respond_error(500, codes::kRuntimeError, std::string("cannot queue work: ") + uv_strerror(rc));
  }
  http::await(ex, *w);
}

}  // namespace

void envd_download(FileService& svc, Exchange& ex, std::string path, std::string user) {
  auto w = std::make_unique<OpenWork>();
  w->path = std::move(path);
  w->e2b_user = std::move(user);
  queue_open(svc, ex, std::move(w));
}

void add_download_route(RouteTable& routes, const std::string& prefix, const FileServiceFor& service) {
  routes.add("GET", prefix + "/files/download", [service](Exchange& ex) {
    if (FileService* svc = service(ex)) handle_download(*svc, ex);
  });
}

}  // namespace execd::api
