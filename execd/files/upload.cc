// execd/files/upload: an upload (POST /files/upload, E2B's POST /files), the
// exchange's Source from the request's head to the answer. The multipart
// body is parsed as it arrives (protocol/multipart) and each file is written
// through fs::AtomicFile by a per-upload writer on the threadpool
// (execd/files/upload_writer).
//
// * Pairing: each `file` part belongs to the oldest `metadata` part not yet
//   paired, so a metadata part must come before its file part (every SDK does
//   this). Parts with other names are ignored. A `metadata` part may be a
//   plain form field or a file part.
// * Memory stays flat: file data goes to the writer in 1 MiB aligned pieces;
//   above 3 MiB waiting for the writer the request body is paused, below
//   1 MiB resumed. Writes of one upload run strictly in order, one pool job
//   at a time. Temp files use O_DIRECT where the filesystem allows it.
// * All or nothing: every file is written to a temp file next to its target
//   and flushed when its part ends; only when the whole body was valid and
//   every file flushed are they renamed into place. Any failure (bad
//   multipart, bad metadata, unknown owner, EACCES, ENOSPC, client gone)
//   removes every temp file and every directory the upload created.
// * A rejected upload is answered only once its body has been read.
// * The same pipeline serves E2B's POST /files (add_envd_upload_route): a
//   raw body (application/octet-stream) to `?path=`, or multipart `file`
//   parts each to its file name (or to `?path=`), resolved against the home
//   of `?username=` and owned by that user, as envd writes them; answered
//   with envd's [{"name","type","path"}].
// * E2B's `Content-Encoding: gzip` (the SDKs' gzip=True): the body is
//   inflated (protocol/gunzip) in front of the same pipeline, a 64 KiB piece
//   at a time, and only while the writer keeps up: while the upload is
//   paused, compressed bytes already read wait (one socket read at most) and
//   zlib holds the rest, so a bomb costs no more memory than a plain upload.
//   What the body inflates to counts against --archive-max-bytes (413, as an
//   archive extraction); a corrupt or cut stream is 400. Either fails the
//   upload like any other failure: nothing is left behind.
//
// Ownership: the Upload is the exchange's Source and goes with it. What the
// pool touches (the files being written, DiskState) travels with each write
// job and comes back to the upload through a Link; an upload that goes (its
// client left) while a job is out leaves that job to throw away what was
// written, on the pool, once it is done. Nothing owns itself.
#include "execd/files/upload.h"

#include <uv.h>

#include <deque>
#include <memory>

#include "execd/files/file_jobs.h"
#include "execd/files/upload_writer.h"
#include "execd/journal/journal.h"
#include "execd/link.h"
#include "execd/work_gate.h"
#include "protocol/errors.h"
#include "protocol/file_requests.h"
#include "protocol/gunzip.h"
#include "protocol/multipart.h"

namespace execd::files {

namespace codes = protocol::codes;
using http::Exchange;
using protocol::HttpRequest;

namespace {

constexpr size_t kPauseAbove = 3u << 20;     // waiting for the writer: stop reading the socket
constexpr size_t kResumeBelow = 1u << 20;    // ... and read again
constexpr size_t kSpareChunks = 4;           // recycled write buffers kept per upload
constexpr size_t kMaxMetadataBytes = 64 * 1024;
constexpr size_t kInflatePiece = 64 * 1024;  // gzip bodies: inflated this much at a time

class Upload;

class Upload;

// One pool job: the upload's write steps, in order, with the disk state.
struct WriteJob {
  WorkGate::Ticket work;
  Link<Upload> upload;
  std::unique_ptr<DiskState> disk;
  std::vector<WriteOp> ops;
  size_t bytes = 0;
};

class Upload final : public http::Source {
 public:
  Upload(const FileService& svc, Exchange& ex, std::optional<EnvdUpload> e2b = std::nullopt)
      : svc_(svc), ex_(ex), e2b_(std::move(e2b)), disk_(std::make_unique<DiskState>()) {}
  ~Upload() override {
    // The client left before the end: what was written goes. A job still
    // out does that itself once it is back (it holds the disk state).
    if (!committed_) abort_on_pool(svc_.ctx.loop, std::move(disk_), svc_.mount);
  }
  std::vector<std::string> journal_paths;  // as given

  void on_body(const char* data, size_t len) override {
    if (gunzip_) return gzip_body(data, len);
    body(data, len);
  }
  void stop() override { job_.cut(); }

  void begin(const HttpRequest& req) {
    const std::string* type = req.header("content-type");
    if (e2b_ && protocol::content_coding(req.header("content-encoding")) == protocol::ContentCoding::gzip)
      gunzip_ = std::make_unique<protocol::Gunzip>(static_cast<uint64_t>(svc_.ctx.config.archive_max_bytes));
    if (e2b_ && (!type || type->rfind("multipart/", 0) != 0)) {
      // A raw body is the one file, at ?path=.
      if (!e2b_->path)
        return fail(FileReply::error(400, codes::kMissingQuery, "path query parameter is required for a raw body upload"));
      raw_ = true;
      part_ = Part::file;
      current_ = 0;
      metadata_parts_ = file_parts_ = 1;
      open_e2b(*e2b_->path);
      return;
    }
    auto boundary = protocol::boundary_from_content_type(type ? *type : "");
    if (!boundary.boundary) {
      fail(FileReply::error(400, codes::kInvalidFile, "multipart form is empty: " + boundary.error));
    } else {
      protocol::MultipartCallbacks cb;
      cb.on_part_begin = [this](const protocol::PartHeaders& h) { part_begin(h); };
      cb.on_part_data = [this](std::string_view chunk) { part_data(chunk); };
      cb.on_part_end = [this] { part_end(); };
      parser_ = std::make_unique<protocol::MultipartParser>(*boundary.boundary, std::move(cb));
    }
  }

  void body(const char* data, size_t len) {
    if (failure_) return;  // rejected: read and discard the rest
    if (raw_) return part_data(std::string_view(data, len));
    if (!parser_) return;
    if (!parser_->feed(data, len) && !failure_) parser_failed();
  }

  // The whole body has arrived (a gzip body may still have bytes to inflate).
  void body_complete() {
    if (!gunzip_) return decoded_body_complete();
    body_ended_ = true;
    inflate_held();
  }

 private:
  enum class Part { none, metadata, file, ignored };

  // Gzip: inflate what the writer has room for; keep the rest of `data`.
  void gzip_body(const char* data, size_t len) {
    if (failure_) return;  // rejected: read and discard the rest
    if (!held_.empty()) {
      held_.append(data, len);
      return inflate_held();
    }
    size_t used = inflate_some(std::string_view(data, len));
    if (!failure_ && used < len) held_.assign(data + used, len - used);
  }

  // Inflates until the input is used up, the writer is behind (paused_) or
  // the stream fails; returns the input bytes taken.
  size_t inflate_some(std::string_view in) {
    if (!inflated_) inflated_ = std::make_unique<char[]>(kInflatePiece);
    size_t used = 0;
    while (!failure_ && !paused_) {
      protocol::Gunzip::Step step = gunzip_->inflate(in.substr(used), inflated_.get(), kInflatePiece);
      used += step.consumed;
      if (gunzip_->failed()) {
        if (gunzip_->too_large()) fail(FileReply::error(413, codes::kPayloadTooLarge, gunzip_->error()));
        else fail(FileReply::error(400, codes::kInvalidFileContent, gunzip_->error()));
        break;
      }
      if (step.produced) body(inflated_.get(), step.produced);
      // Less than a full piece with all input taken: zlib holds nothing more.
      if (step.produced < kInflatePiece && used == in.size()) break;
    }
    return used;
  }

  // What was held back, once the writer caught up or the body ended; then,
  // at the end of the body, the end of the stream.
  void inflate_held() {
    if (!failure_) held_.erase(0, inflate_some(held_));
    if (!body_ended_ || gzip_finished_) return;
    if (!failure_ && paused_) return;  // the writer is behind; job_done comes back here
    gzip_finished_ = true;
    held_.clear();
    if (!failure_ && !gunzip_->complete())
      fail(FileReply::error(400, codes::kInvalidFileContent, "invalid gzip data: the body ended inside the stream"));
    decoded_body_complete();
  }

  void decoded_body_complete() {
    body_done_ = true;
    if (raw_ && !failure_) part_end();
    if (!failure_ && parser_ && !parser_->finish()) parser_failed();
    if (!failure_ && e2b_) {
      if (file_parts_ == 0) fail(FileReply::error(400, codes::kInvalidFileContent, "no file part in the upload"));
    } else if (!failure_) {
      if (metadata_parts_ == 0)
        fail(FileReply::error(400, codes::kInvalidFileMetadata, "metadata file is missing"));
      else if (file_parts_ == 0)
        fail(FileReply::error(400, codes::kInvalidFileContent, "file is missing"));
      else if (metadata_parts_ != file_parts_)
        fail(FileReply::error(400, codes::kInvalidFile,
                              "metadata and file count mismatch: " + std::to_string(metadata_parts_) + " vs " +
                                  std::to_string(file_parts_)));
    }
    if (!failure_) enqueue(WriteOp::make(WriteOp::commit));
    maybe_respond();
  }

  void part_begin(const protocol::PartHeaders& h) {
    if (e2b_) {
      // envd: every `file` part is a file, at ?path= or at its file name.
      if (h.name != "file") {
        part_ = Part::ignored;
        return;
      }
      std::string path = e2b_->path ? *e2b_->path : h.filename.value_or("");
      if (path.empty())
        return fail(FileReply::error(400, codes::kInvalidFileMetadata, "a file part without a file name or ?path="));
      part_ = Part::file;
      current_ = file_parts_++;
      metadata_parts_ = file_parts_;
      open_e2b(path);
      return;
    }
    if (h.name == "metadata") {
      part_ = Part::metadata;
      metadata_text_.clear();
    } else if (h.name == "file") {
      if (file_parts_ >= metadata_parts_)
        return fail(FileReply::error(400, codes::kInvalidFileMetadata,
                                     "file part " + std::to_string(file_parts_ + 1) + " has no metadata part before it"));
      part_ = Part::file;
      current_ = file_parts_++;
    } else {
      part_ = Part::ignored;
    }
  }

  void part_data(std::string_view chunk) {
    if (failure_) return;
    if (part_ == Part::metadata) {
      if (metadata_text_.size() + chunk.size() > kMaxMetadataBytes)
        return fail(FileReply::error(400, codes::kInvalidFileMetadata, "metadata part is too large"));
      metadata_text_.append(chunk);
    } else if (part_ == Part::file) {
      while (!chunk.empty()) {
        if (!write_buf_.allocated()) write_buf_ = take_chunk();
        size_t take = std::min(chunk.size(), write_buf_.room());
        write_buf_.append(chunk.data(), take);
        chunk.remove_prefix(take);
        if (write_buf_.room() == 0) flush_write_buf();
      }
    }
  }

  void part_end() {
    if (failure_) return;
    if (part_ == Part::metadata) {
      metadata_done();
    } else if (part_ == Part::file) {
      flush_write_buf();
      enqueue(WriteOp::make(WriteOp::flush, current_));
    }
    part_ = Part::none;
  }

  void metadata_done() {
    auto decoded = protocol::decode_upload_metadata(metadata_text_);
    if (auto* err = std::get_if<protocol::DecodeError>(&decoded))
      return fail(FileReply::error(400, codes::kInvalidFileMetadata, err->message));
    auto& m = std::get<protocol::UploadMetadata>(decoded);
    WriteOp op = WriteOp::make(WriteOp::open, metadata_parts_++);
    op.path = m.path;
    journal_paths.push_back(op.path);
    op.spec = to_permission_spec(m.permissions);
    enqueue(std::move(op));
  }

  void open_e2b(const std::string& path) {
    WriteOp op = WriteOp::make(WriteOp::open, current_);
    op.path = path;
    op.e2b_user = e2b_->user;
    op.e2b_metadata = e2b_->metadata;
    op.e2b_xattr_prefix = e2b_->metadata_xattr_prefix;
    journal_paths.push_back(path);
    enqueue(std::move(op));
  }

  // Recycled buffers: fresh 1 MiB allocations would cost a page fault per
  // 4 KiB on every chunk.
  Chunk take_chunk() {
    if (spare_.empty()) return Chunk::allocate();
    Chunk c = std::move(spare_.back());
    spare_.pop_back();
    c.clear();
    return c;
  }

  void flush_write_buf() {
    if (!write_buf_.allocated() || write_buf_.empty()) return;
    WriteOp op = WriteOp::make(WriteOp::write, current_);
    op.data = std::move(write_buf_);
    write_buf_ = Chunk();
    enqueue(std::move(op));
  }

  void parser_failed() {
    fail(FileReply::error(400, codes::kInvalidFile, "invalid multipart body: " + parser_->error_message()));
  }

  // First failure wins; everything written so far is thrown away.
  void fail(FileReply reply) {
    if (failure_) return;
    failure_ = std::move(reply);
    write_buf_ = Chunk();
    for (auto& op : queue_) waiting_bytes_ -= op.data.size();
    queue_.clear();
    enqueue(WriteOp::make(WriteOp::abort));
    if (paused_) {
      paused_ = false;
      ex_.resume_body();
    }
  }

  void enqueue(WriteOp op) {
    waiting_bytes_ += op.data.size();
    queue_.push_back(std::move(op));
    if (!paused_ && waiting_bytes_ > kPauseAbove && !failure_) {
      paused_ = true;
      ex_.pause_body();
    }
    kick();
  }

  // Hands everything queued to one pool job, unless one is running.
  void kick() {
    if (job_ || queue_.empty()) return;
    auto* job = new WriteJob;
    job->work.req.data = job;
    job->disk = std::move(disk_);
    for (auto& op : queue_) {
      job->bytes += op.data.size();
      job->ops.push_back(std::move(op));
    }
    queue_.clear();
    link(*job, job->upload, *this, job_);
    svc_.queue(
        job->work,
        [](uv_work_t* w) {
          auto* job = static_cast<WriteJob*>(w->data);
          for (auto& op : job->ops) job->disk->run(op);  // op.data goes back to the loop for reuse
        },
        [](uv_work_t* w, int status) {
          std::unique_ptr<WriteJob> job(static_cast<WriteJob*>(w->data));
          // Not run (the session's namespace could not be entered): a failure.
          if (status != 0 && !job->disk->error)
            job->disk->error = FileReply::error(500, codes::kRuntimeError,
                                                std::string("upload work did not run: ") + uv_strerror(status));
          Upload* up = job->upload.get();
          if (!up) {
            // The upload went while this was out: throw away what it wrote,
            // unless this very job committed it.
            bool committed = !job->ops.empty() && job->ops.back().kind == WriteOp::commit && !job->disk->error;
            if (!committed) abort_on_pool(w->loop, std::move(job->disk), job->work.mount);
            return;
          }
          job->upload.cut();
          up->job_done(*job);
        });
  }

  void job_done(WriteJob& job) {
    disk_ = std::move(job.disk);
    for (auto& op : job.ops) {
      if (op.kind == WriteOp::commit && !disk_->error) committed_ = true;
      if (op.kind == WriteOp::abort) committed_ = true;  // nothing left to throw away
      if (op.data.allocated() && spare_.size() < kSpareChunks) spare_.push_back(std::move(op.data));
    }
    waiting_bytes_ -= job.bytes;
    if (disk_->error && !failure_) fail(*disk_->error);
    if (paused_ && waiting_bytes_ < kResumeBelow) {
      paused_ = false;
      ex_.resume_body();
    }
    // Gzip: output zlib held back, bytes read meanwhile, or (after a
    // failure or at the body's end) finishing the stream.
    if (gunzip_) inflate_held();
    kick();
    maybe_respond();
  }

  void maybe_respond() {
    if (!body_done_ || job_ || !queue_.empty() || responded_) return;
    responded_ = true;
    if (!failure_) journal_change(svc_, "upload", journal_paths);
    if (e2b_ && !failure_) {
      std::vector<std::string> written;
      for (const auto& e : disk_->entries) written.push_back(e.shown_path);
      return send_reply(ex_, FileReply{200, "application/json", e2b_->reply(written), {}});
    }
    send_reply(ex_, failure_ ? *failure_ : FileReply::empty());
  }

  FileService svc_;  // a copy: an isolated session's may go first
  Exchange& ex_;
  std::optional<EnvdUpload> e2b_;
  bool raw_ = false;  // E2B: the body is the file
  std::unique_ptr<protocol::MultipartParser> parser_;
  std::unique_ptr<protocol::Gunzip> gunzip_;  // E2B, Content-Encoding: gzip
  std::unique_ptr<char[]> inflated_;          // kInflatePiece
  std::string held_;                          // compressed bytes read while the writer was behind
  bool body_ended_ = false, gzip_finished_ = false;
  std::optional<FileReply> failure_;
  Part part_ = Part::none;
  std::string metadata_text_;
  size_t metadata_parts_ = 0, file_parts_ = 0, current_ = 0;
  Chunk write_buf_;
  std::vector<Chunk> spare_;
  std::deque<WriteOp> queue_;
  size_t waiting_bytes_ = 0;  // file data queued or being written
  bool paused_ = false, body_done_ = false, responded_ = false;
  bool committed_ = false;  // renamed into place (or thrown away): nothing to undo
  std::unique_ptr<DiskState> disk_;  // with the job while one is out
  Link<WriteJob> job_;               // the write job out
};

}  // namespace

void start_upload(const FileService& svc, Exchange& ex, std::optional<EnvdUpload> e2b) {
  auto up = std::make_unique<Upload>(svc, ex, std::move(e2b));
  Upload& u = *up;
  ex.attach(std::move(up));
  ex.on_complete = [&u](Exchange&) { u.body_complete(); };
  u.begin(ex.request());
}

}  // namespace execd::files
