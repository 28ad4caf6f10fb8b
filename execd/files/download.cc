// execd/files/download: see header.
#include "execd/files/download.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <optional>

#include "execd/files/download_headers.h"
#include "execd/files/file_jobs.h"
#include "execd/http/awaiter.h"
#include "execd/http/connection.h"
#include "execd/link.h"
#include "execd/runners/command_spawn.h"
#include "execd/work_gate.h"
#include "fs/entries.h"
#include "fs/expand.h"
#include "fs/paths.h"
#include "protocol/errors.h"
#include "protocol/range.h"

namespace execd::files {

namespace codes = protocol::codes;
using http::Exchange;

namespace {

// Read ahead this much of the file on the pool before the loop sends it.
constexpr uint64_t kWindowBytes = 32ull << 20;

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

}  // namespace

void send_file(FileService& svc, Exchange& ex, std::string path) {
  auto* w = new OpenWork;
  w->work.req.data = w;
  w->path = std::move(path);
  if (const std::string* range = ex.header("range")) w->range = *range;
  int rc = svc.queue(
      w->work, [](uv_work_t* work) { open_for_download(*static_cast<OpenWork*>(work->data)); }, after_open);
  if (rc != 0) {
    delete w;
    return ex.respond_error(500, codes::kRuntimeError, std::string("cannot queue work: ") + uv_strerror(rc));
  }
  http::await(ex, *w);
}

void send_envd_file(FileService& svc, Exchange& ex, std::string path, std::string user) {
  auto w = std::make_unique<OpenWork>();
  w->path = std::move(path);
  w->e2b_user = std::move(user);
  queue_open(svc, ex, std::move(w));
}

}  // namespace execd::files
