// execd/files/archive_upload: see header.
#include "execd/files/archive_upload.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <optional>

#include "execd/clock.h"
#include "execd/context.h"
#include "execd/exec/state_budget.h"
#include "execd/files/file_jobs.h"
#include "execd/http/connection.h"
#include "execd/journal/entries.h"
#include "execd/journal/journal.h"
#include "execd/link.h"
#include "execd/work_gate.h"
#include "fs/archive.h"
#include "fs/paths.h"
#include "fs/small_file.h"
#include "protocol/errors.h"
#include "protocol/sha.h"

namespace execd::files {

namespace codes = protocol::codes;
using http::Exchange;

namespace {

constexpr size_t kSpoolChunk = 1u << 20;   // body bytes handed to one write job
constexpr size_t kSpoolPauseAbove = 4u << 20;   // waiting for the disk: stop reading the socket
constexpr size_t kSpoolResumeBelow = 1u << 20;

FileReply archive_reply(const fs::Error& e) {
  if (e.kind == fs::ErrorKind::conflict) return FileReply::error(409, codes::kConflict, e.message);
  if (e.kind == fs::ErrorKind::bad_request) return FileReply::error(400, "ARCHIVE_REFUSED", e.message);
  return FileReply::from(e);
}

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

}  // namespace

void start_archive_upload(FileService& svc, Exchange& ex, ExtractParams params) {
  auto up = std::make_unique<ArchiveUpload>(svc, ex, std::move(params));
  ArchiveUpload& u = *up;
  ex.attach(std::move(up));
  ex.on_complete = [&u](Exchange&) { u.body_complete(); };
}

}  // namespace execd::files
