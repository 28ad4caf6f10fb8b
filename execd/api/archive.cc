// execd/api/archive: directory archives (fs/archive does the formats).
//   GET  /files/archive?path=DIR&format=tar|tar.gz|zip
//        a chunked stream of the archive, produced a piece at a time on the
//        pool through the file gate, each piece only once the client has
//        taken the last (no temporary copy of the tree, no unbounded buffer;
//        a client that leaves stops the walk). A file that cannot be read
//        mid-way, or that shrinks or grows while it is read, cuts the
//        connection (no last chunk): a truncated archive, never a silently
//        incomplete one.
//   POST /files/archive?path=DIR[&replace=true][&owner=&group=&mode=]
//        a tar (plain, gzip, bzip2, xz, zstd) or zip body, spooled to an
//        unnamed file in the state directory as it arrives (paused while the
//        disk is behind), then extracted into a new directory next to DIR and
//        renamed into place only if every entry was valid (fs/archive lists
//        what is refused). owner/group go to every extracted entry, mode to
//        DIR itself, as an upload's metadata. The body is limited by
//        --archive-max-bytes (413 before it is read when Content-Length says
//        so), the extraction by --archive-max-entries and --archive-max-bytes.
//        Answers {"path","entries","files","directories","symlinks",
//        "hardlinks","bytes","format","replaced","archive_sha256"} and
//        journals it.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <memory>

#include "execd/journal/entries.h"
#include "execd/api/api.h"
#include "execd/http/awaiter.h"
#include "execd/api/download.h"
#include "execd/api/file_jobs.h"
#include "execd/journal/journal.h"
#include "execd/work_gate.h"
#include "execd/clock.h"
#include "execd/context.h"
#include "execd/exec/state_budget.h"
#include "execd/http/connection.h"
#include "execd/link.h"
#include "fs/archive.h"
#include "fs/paths.h"
#include "fs/small_file.h"
#include "protocol/errors.h"
#include "protocol/file_requests.h"
#include "protocol/query_values.h"
#include "protocol/resume.h"
#include "protocol/sha.h"

namespace execd::api {

namespace codes = protocol::codes;
using http::Exchange;

namespace {

// Archive bytes one pool job produces. A piece overshoots its target by at
// most one read block of libarchive's (64 KiB plus alignment) or one
// 64 KiB run of zeros, so a buffer of exactly 1 MiB is never outgrown: it
// stays below the mmap threshold and the write queue keeps it for reuse,
// where a buffer that grew past it was mapped, faulted in page by page and
// unmapped again for every piece.
constexpr size_t kPieceBuffer = 1u << 20;
constexpr size_t kPiece = kPieceBuffer - (192u << 10);
constexpr size_t kSpoolChunk = 1u << 20;   // body bytes handed to one write job
constexpr size_t kSpoolPauseAbove = 4u << 20;   // waiting for the disk: stop reading the socket
constexpr size_t kSpoolResumeBelow = 1u << 20;

FileReply archive_reply(const fs::Error& e) {
  if (e.kind == fs::ErrorKind::conflict) return FileReply::error(409, codes::kConflict, e.message);
  if (e.kind == fs::ErrorKind::bad_request) return FileReply::error(400, "ARCHIVE_REFUSED", e.message);
  return FileReply::from(e);
}

// ---- GET: the archive of a directory, a piece at a time --------------------

class ArchiveSender;

struct PieceJob {
  WorkGate::Ticket work;
  std::unique_ptr<fs::DirArchiver> archiver;
  std::string piece;
  std::optional<fs::Error> error;
  Link<ArchiveSender> sender;
};

// At most one piece is being produced and one held while the client is
// behind (besides what the connection's write queue holds): the next piece
// is made while the last one is sent, and memory stays flat.
class ArchiveSender final : public http::Source {
 public:
  ArchiveSender(Exchange& ex, WorkGate& gate, uv_loop_t* loop, std::unique_ptr<fs::DirArchiver> a, std::string what)
      : ex_(ex), gate_(gate), loop_(loop), archiver_(std::move(a)), what_(std::move(what)) {}
  Link<PieceJob> job;

  void next() {
    if (job || !archiver_ || archiver_->finished() || !held_.empty()) return;
    auto* j = new PieceJob;
    j->work.req.data = j;
    j->archiver = std::move(archiver_);
    j->piece = ex_.take_buffer();
    j->piece.clear();
    j->piece.reserve(kPieceBuffer);
    link(*j, j->sender, *this, job);
    int rc = gate_.queue(
        loop_, j->work,
        [](uv_work_t* w) {
          auto* j = static_cast<PieceJob*>(w->data);
          if (auto st = j->archiver->produce(j->piece, kPiece); !st) j->error = st.error();
        },
        [](uv_work_t* w, int status) {
          std::unique_ptr<PieceJob> j(static_cast<PieceJob*>(w->data));
          ArchiveSender* s = j->sender.get();
          if (!s) return;  // the client left: the walk stops here
          j->sender.cut();
          if (status == UV_ECANCELED) return;
          s->piece_done(*j);
        });
    if (rc != 0) {
      delete j;
      ex_.connection().close();
    }
  }
  void proceed() override {
    waiting_ = false;
    deliver();
  }

 private:
  void piece_done(PieceJob& j) {
    archiver_ = std::move(j.archiver);
    if (j.error) {
      // The head is out: cutting the connection is the honest failure.
      spdlog::warn("archive of {} aborted after {} entries: {}", what_, archiver_->entries(), j.error->message);
      return ex_.connection().close();
    }
    held_ = std::move(j.piece);
    deliver();
  }

  // Sends the held piece unless the client is behind, ends the response
  // after the last one, and starts the next piece either way.
  void deliver() {
    if (!held_.empty()) {
      if (waiting_) return;
      if (!ex_.send(std::move(held_))) waiting_ = true;
      held_ = std::string();
    }
    if (archiver_ && archiver_->finished()) return ex_.end();
    next();
  }

  Exchange& ex_;
  WorkGate& gate_;
  uv_loop_t* loop_;
  std::unique_ptr<fs::DirArchiver> archiver_;  // with the job while one is out
  std::string what_;
  std::string held_;  // a produced piece waiting for the client
  bool waiting_ = false;
};

struct OpenArchive : http::Awaitable {
  WorkGate::Ticket work;
  std::string path;
  fs::ArchiveFormat format;
  std::unique_ptr<fs::DirArchiver> archiver;
  std::string name;
  std::optional<fs::Error> error;
};

void handle_get(FileService& svc, Exchange& ex) {
  const std::string* path = protocol::query_value(ex.query, "path");
  if (!path || path->empty()) return ex.respond_error(400, codes::kMissingQuery, "missing query parameter 'path'");
  const std::string* fmt = protocol::query_value(ex.query, "format");
  auto format = fs::archive_format_from_name(fmt ? *fmt : "");
  if (!format) return ex.respond_error(400, codes::kInvalidRequestBody, "format must be tar, tar.gz or zip");
  auto* w = new OpenArchive;
  w->work.req.data = w;
  w->path = *path;
  w->format = *format;
  int rc = svc.gate.queue(
      svc.ctx.loop, w->work,
      [](uv_work_t* work) {
        auto* w = static_cast<OpenArchive*>(work->data);
        auto expanded = fs::expand_path_abs(w->path, fs::process_env_lookup());
        if (!expanded) return void(w->error = expanded.error());
        auto a = fs::DirArchiver::open(expanded.value(), w->format);
        if (!a) return void(w->error = a.error());
        w->archiver = std::move(a.value());
        std::string base = fs::base_name(expanded.value());
        w->name = (base == "/" ? std::string("root") : base) + fs::archive_extension(w->format);
      },
      [](uv_work_t* work, int) {
        std::unique_ptr<OpenArchive> w(static_cast<OpenArchive*>(work->data));
        Exchange* ex = w->exchange();
        if (!ex) return;
        if (w->error) return send_reply(*ex, FileReply::from(*w->error));
        ex->begin_chunked(200, {std::string("Content-Type: ") + fs::archive_content_type(w->format),
                                "Content-Disposition: " + content_disposition(w->name), "X-Accel-Buffering: no"});
        auto sender = std::make_unique<ArchiveSender>(*ex, *w->work.gate, work->loop, std::move(w->archiver), w->path);
        ArchiveSender& s = *sender;
        ex->attach(std::move(sender));
        s.next();
      });
  if (rc != 0) {
    delete w;
    return ex.respond_error(500, codes::kRuntimeError, std::string("cannot queue work: ") + uv_strerror(rc));
  }
  http::await(ex, *w);
}

// ---- POST: spool the body, then extract ------------------------------------

struct ExtractParams {
  std::string path;
  fs::PermissionSpec owner;
  bool replace = false;
  uint64_t max_entries = 0, max_bytes = 0;
  std::string state_dir;
};

// What the pool touches; travels with each job.
struct Spool {
  int fd = -1;
  uint64_t size = 0;
  protocol::Sha256 sha;
  ~Spool() {
    if (fd >= 0) ::close(fd);
  }
};

class ArchiveUpload;

struct SpoolJob {
  WorkGate::Ticket work;
  std::unique_ptr<Spool> spool;
  std::string data;
  bool extract = false;
  ExtractParams params;
  std::shared_ptr<std::atomic<bool>> cancelled;
  // results
  std::optional<FileReply> error;
  fs::ExtractResult result;
  std::string target, sha256;
  Link<ArchiveUpload> upload;
};

void spool_work(SpoolJob& j) {
  Spool& s = *j.spool;
  if (s.fd < 0) {
    // Unnamed: nothing is left behind whatever happens to execd.
    s.fd = ::open(j.params.state_dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (s.fd < 0) {
      std::string tmpl = j.params.state_dir + "/archive-XXXXXX";
      s.fd = mkostemp(tmpl.data(), O_CLOEXEC);
      if (s.fd >= 0) unlink(tmpl.c_str());
    }
    if (s.fd < 0) return void(j.error = FileReply::from(fs::errno_error(errno, "spool file in " + j.params.state_dir)));
  }
  if (!j.data.empty()) {
    if (int err = fs::write_all(s.fd, j.data)) return void(j.error = FileReply::from(fs::errno_error(err, "spooling the archive")));
    s.sha.update(j.data.data(), j.data.size());
    s.size += j.data.size();
    j.data.clear();
  }
  if (!j.extract) return;
  auto target = fs::expand_path_abs(j.params.path, fs::process_env_lookup());
  if (!target) return void(j.error = FileReply::from(target.error()));
  auto owner = fs::resolve_permissions(j.params.owner);
  if (!owner) return void(j.error = FileReply::from(owner.error()));
  fs::ExtractOptions opt;
  opt.owner = owner.value();
  opt.replace = j.params.replace;
  opt.max_entries = j.params.max_entries;
  opt.max_bytes = j.params.max_bytes;
  opt.cancelled = j.cancelled.get();
  j.target = target.value();
  j.sha256 = protocol::lower_hex(s.sha.finish());
  auto r = fs::extract_archive(s.fd, j.target, opt);
  if (!r) return void(j.error = archive_reply(r.error()));
  j.result = r.value();
}

class ArchiveUpload final : public http::Source {
 public:
  ArchiveUpload(FileService& svc, Exchange& ex, ExtractParams params)
      : svc_(svc), ex_(ex), params_(std::move(params)), spool_(std::make_unique<Spool>()), budget_(svc.state_budget),
        cancelled_(std::make_shared<std::atomic<bool>>(false)) {}
  ~ArchiveUpload() override {
    cancelled_->store(true);
    if (budget_) budget_->add_spool(-static_cast<int64_t>(spool_counted_));
  }

  void on_body(const char* data, size_t len) override {
    if (failure_) return;
    received_ += len;
    if (received_ > params_.max_bytes)
      return fail(FileReply::error(413, codes::kPayloadTooLarge,
                                   "the archive is larger than " + std::to_string(params_.max_bytes) +
                                       " bytes (--archive-max-bytes)"));
    if (exec::StateBudget* budget = budget_) {
      // The spool's bytes count against the state budget while the upload
      // lasts. Room for them: finished runs' output goes first; past the
      // whole budget even so, the upload is refused rather than filling
      // the disk.
      budget->add_spool(static_cast<int64_t>(len));
      spool_counted_ += len;
      budget->need(0);
      if (budget->used() > budget->limit())
        return fail(FileReply::error(507, codes::kInsufficientStorage,
                                     "the archive does not fit in the state directory's budget (--state-budget)"));
    }
    pending_.append(data, len);
    if (!paused_ && pending_.size() + in_flight_ > kSpoolPauseAbove) {
      paused_ = true;
      ex_.pause_body();
    }
    if (pending_.size() >= kSpoolChunk) kick();
  }
  void stop() override {
    cancelled_->store(true);
    job_.cut();
  }
  void body_complete() {
    complete_ = true;
    if (failure_) return respond();
    kick();
  }

 private:
  void fail(FileReply reply) {
    if (failure_) return;
    failure_ = std::move(reply);
    pending_.clear();
    // Answered now: the rest of the body is not read (the connection closes).
    respond();
  }

  void respond() {
    if (responded_) return;
    responded_ = true;
    send_reply(ex_, *failure_);
  }

  void kick() {
    if (job_ || failure_ || responded_) return;
    bool extract = complete_;
    if (pending_.empty() && !extract) return;
    auto* j = new SpoolJob;
    j->work.req.data = j;
    j->spool = std::move(spool_);
    j->data = std::move(pending_);
    pending_.clear();
    j->extract = extract;
    j->params = params_;
    j->cancelled = cancelled_;
    in_flight_ = j->data.size();
    link(*j, j->upload, *this, job_);
    int rc = svc_.gate.queue(
        svc_.ctx.loop, j->work, [](uv_work_t* w) { spool_work(*static_cast<SpoolJob*>(w->data)); },
        [](uv_work_t* w, int status) {
          std::unique_ptr<SpoolJob> j(static_cast<SpoolJob*>(w->data));
          ArchiveUpload* up = j->upload.get();
          if (!up) return;  // the client left: the spool closes (and vanishes) with the job
          j->upload.cut();
          if (status == UV_ECANCELED) return;
          up->job_done(*j);
        });
    if (rc != 0) {
      delete j;
      fail(FileReply::error(500, codes::kRuntimeError, "cannot queue work"));
    }
  }

  void job_done(SpoolJob& j) {
    spool_ = std::move(j.spool);
    in_flight_ = 0;
    if (paused_ && pending_.size() < kSpoolResumeBelow) {
      paused_ = false;
      ex_.resume_body();
    }
    if (j.error) return fail(std::move(*j.error));
    if (!j.extract) return kick();
    nlohmann::json out;
    out["path"] = j.target;
    out["entries"] = j.result.entries;
    out["files"] = j.result.files;
    out["directories"] = j.result.directories;
    out["symlinks"] = j.result.symlinks;
    out["hardlinks"] = j.result.hardlinks;
    out["bytes"] = j.result.bytes;
    out["format"] = j.result.format;
    out["replaced"] = j.result.replaced;
    out["archive_bytes"] = spool_->size;
    out["archive_sha256"] = j.sha256;
    if (svc_.journal.enabled())
      svc_.journal.append(journal::extraction_entry(
          {j.target, j.sha256, spool_->size, j.result.entries, j.result.bytes, j.result.replaced}));
    responded_ = true;
    send_reply(ex_, FileReply::json(out));
  }

  FileService& svc_;
  Exchange& ex_;
  ExtractParams params_;
  std::unique_ptr<Spool> spool_;  // with the job while one is out
  exec::StateBudget* budget_;     // the service's, kept: a user's service may go first
  uint64_t spool_counted_ = 0;    // against budget_
  std::shared_ptr<std::atomic<bool>> cancelled_;
  std::string pending_;
  size_t in_flight_ = 0;
  uint64_t received_ = 0;
  bool paused_ = false, complete_ = false, responded_ = false;
  std::optional<FileReply> failure_;
  Link<SpoolJob> job_;
};

bool query_flag(const Exchange& ex, const char* name) {
  const std::string* v = protocol::query_value(ex.query, name);
  return v && (*v == "true" || *v == "1");
}

void post_head(FileService& svc, Exchange& ex) {
  auto refuse = [&ex](int status, std::string_view code, std::string message) {
    ex.on_complete = [status, code = std::string(code), message](Exchange& e) { e.respond_error(status, code, message); };
  };
  ExtractParams p;
  const std::string* path = protocol::query_value(ex.query, "path");
  if (!path || path->empty()) return refuse(400, codes::kMissingQuery, "missing query parameter 'path'");
  p.path = *path;
  p.replace = query_flag(ex, "replace");
  if (const std::string* o = protocol::query_value(ex.query, "owner"); o && !o->empty()) p.owner.owner = *o;
  if (const std::string* g = protocol::query_value(ex.query, "group"); g && !g->empty()) p.owner.group = *g;
  if (const std::string* m = protocol::query_value(ex.query, "mode"); m && !m->empty()) {
    auto digits = protocol::parse_offset(*m);
    std::string error = "mode must be octal digits like 755";
    std::optional<uint32_t> mode;
    if (digits && *digits <= 7777) mode = protocol::mode_from_octal_digits(static_cast<int64_t>(*digits), error);
    if (!mode) return refuse(400, codes::kInvalidRequestBody, error);
    p.owner.mode = static_cast<mode_t>(*mode);
  }
  p.max_entries = static_cast<uint64_t>(svc.ctx.config.archive_max_entries);
  p.max_bytes = static_cast<uint64_t>(svc.ctx.config.archive_max_bytes);
  p.state_dir = svc.ctx.config.state_dir;
  // Too large by its own word: answered now, before a byte of it is read
  // (the connection closes after the answer).
  if (const std::string* len = ex.header("content-length")) {
    auto n = protocol::parse_offset(*len);
    if (n && *n > p.max_bytes)
      return ex.respond_error(413, codes::kPayloadTooLarge,
                              "the archive is larger than " + std::to_string(p.max_bytes) + " bytes (--archive-max-bytes)");
  }
  auto up = std::make_unique<ArchiveUpload>(svc, ex, std::move(p));
  ArchiveUpload& u = *up;
  ex.attach(std::move(up));
  ex.on_complete = [&u](Exchange&) { u.body_complete(); };
}

}  // namespace

void add_archive_routes(RouteTable& routes, FileService& svc) {
  routes.add("GET", "/files/archive", [&svc](Exchange& ex) { handle_get(svc, ex); });
  routes.add_streaming(
      "POST", "/files/archive", [&svc](Exchange& ex) { post_head(svc, ex); }, [](Exchange&) {});
}

}  // namespace execd::api
