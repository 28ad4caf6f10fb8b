// execd/api/upload: POST /files/upload. The multipart body is parsed as it
// arrives (protocol/multipart) and each file is written through
// fs::AtomicFile by a per-upload writer on the threadpool.
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
#include <uv.h>

#include "execd/api/api.h"
#include "execd/journal/journal.h"
#include "execd/link.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>

#include "execd/api/envd/files.h"
#include "execd/api/file_jobs.h"
#include "execd/work_gate.h"
#include "execd/runners/command_spawn.h"
#include "fs/atomic_file.h"
#include "fs/entries.h"
#include "fs/pool_job.h"
#include "fs/paths.h"
#include "fs/permissions.h"
#include "protocol/errors.h"
#include "protocol/file_requests.h"
#include "protocol/gunzip.h"
#include "protocol/multipart.h"
#include "pty/namespaces.h"

namespace execd::api {

namespace codes = protocol::codes;
using http::Exchange;
using protocol::HttpRequest;

namespace {

constexpr size_t kWriteChunk = 1u << 20;     // file data handed to the writer at once
constexpr size_t kPauseAbove = 3u << 20;     // waiting for the writer: stop reading the socket
constexpr size_t kResumeBelow = 1u << 20;    // ... and read again
constexpr size_t kSpareChunks = 4;           // recycled write buffers kept per upload
constexpr size_t kMaxMetadataBytes = 64 * 1024;
constexpr size_t kInflatePiece = 64 * 1024;  // gzip bodies: inflated this much at a time

// Directories that do not exist yet on the way to `file_path`, deepest first.
std::vector<std::string> missing_ancestors(const std::string& file_path) {
  std::vector<std::string> out;
  std::string dir = fs::parent_path(fs::clean_path(file_path));
  struct stat st {};
  while (!dir.empty() && dir != "/" && dir != "." && lstat(dir.c_str(), &st) != 0 && errno == ENOENT) {
    out.push_back(dir);
    dir = fs::parent_path(dir);
  }
  return out;
}

// File data on its way to the writer: kWriteChunk bytes of memory aligned
// for O_DIRECT (full chunks go to the device without a page-cache copy).
class Chunk {
 public:
  static Chunk allocate() {
    Chunk c;
    void* p = nullptr;
    if (posix_memalign(&p, fs::AtomicFile::kDirectIoAlign, kWriteChunk) != 0) throw std::bad_alloc();
    c.data_.reset(static_cast<char*>(p));
    return c;
  }
  bool allocated() const { return data_ != nullptr; }
  size_t size() const { return size_; }
  size_t room() const { return kWriteChunk - size_; }
  bool empty() const { return size_ == 0; }
  void append(const char* p, size_t n) {
    memcpy(data_.get() + size_, p, n);
    size_ += n;
  }
  std::string_view view() const { return {data_.get(), size_}; }
  void clear() { size_ = 0; }
  void release() {
    data_.reset();
    size_ = 0;
  }

 private:
  struct Free {
    void operator()(char* p) const { free(p); }
  };
  std::unique_ptr<char, Free> data_;
  size_t size_ = 0;
};

// One step for the writer; executed in order on the threadpool.
struct WriteOp {
  enum Kind { open, write, flush, commit, abort } kind = abort;
  size_t index = 0;          // entry (metadata/file pair) it concerns
  std::string path;          // open: target as given
  fs::PermissionSpec spec;   // open
  std::optional<std::string> e2b_user;  // open, E2B: path against this user's home, owned by the user
  std::map<std::string, std::string> e2b_metadata;  // open, E2B: user.e2b.* xattrs of the file
  Chunk data;                // write

  static WriteOp make(Kind kind, size_t index = 0) {
    WriteOp op;
    op.kind = kind;
    op.index = index;
    return op;
  }
};

// What the writer owns. Only the pool job in flight touches it.
struct DiskState {
  struct Entry {
    std::optional<fs::AtomicFile> file;
    std::vector<std::string> created_dirs;  // deepest first
    std::string shown_path;                 // E2B: the resolved path, as envd reports it
  };
  std::vector<Entry> entries;
  std::optional<FileReply> error;

  void run(WriteOp& op) {
    if (error && op.kind != WriteOp::abort) return;
    switch (op.kind) {
      case WriteOp::open: {
        if (op.e2b_user) return open_e2b(op);
        auto path = fs::expand_path(op.path, fs::process_env_lookup());
        if (!path) return metadata_error(path.error());
        Entry entry;
        entry.created_dirs = missing_ancestors(path.value());
        auto file = fs::AtomicFile::open(path.value(), op.spec);
        if (!file) {
          entries.push_back(std::move(entry));  // so abort removes what open created
          return metadata_error(file.error());
        }
        entry.file.emplace(std::move(file.value()));
        entry.file->enable_direct_io();  // best effort; tmpfs & co stay buffered
        entries.push_back(std::move(entry));
        return;
      }
      case WriteOp::write:
        if (auto s = entries.at(op.index).file->write(op.data.view()); !s) error = FileReply::from(s.error());
        return;
      case WriteOp::flush:
        if (auto s = entries.at(op.index).file->flush(); !s) error = FileReply::from(s.error());
        return;
      case WriteOp::commit:
        for (auto& e : entries)
          if (auto s = e.file->publish(); !s) return void(error = FileReply::from(s.error()));
        return;
      case WriteOp::abort:
        // Every temp file first: a later file may sit in a directory an
        // earlier one created. Then the directories, the latest made first,
        // each chain deepest first.
        for (auto& e : entries)
          if (e.file) e.file->abort();
        for (auto e = entries.rbegin(); e != entries.rend(); ++e)
          for (const auto& dir : e->created_dirs)
            if (rmdir(dir.c_str()) != 0) break;  // not empty (someone else's) or gone
        return;
    }
  }

  // E2B: no variables expanded; relative paths and ~ against the user's
  // home; the file and the directories made for it belong to the user.
  void open_e2b(WriteOp& op) {
    runners::UserIds user;
    if (!runners::lookup_user(*op.e2b_user, user))
      return void(error = FileReply::error(401, codes::kUnauthorized,
                                           "error looking up user '" + *op.e2b_user + "': unknown user"));
    Entry entry;
    entry.shown_path = fs::resolve_user_path(op.path, user.home);
    entry.created_dirs = missing_ancestors(entry.shown_path);
    std::optional<uid_t> uid;
    std::optional<gid_t> gid;
    fs::PermissionSpec spec;
    if (!op.e2b_user->empty()) {
      uid = user.uid;
      gid = user.gid;
      spec.owner = std::to_string(user.uid);
      spec.group = std::to_string(user.gid);
    }
    // envd creates files 0666 & ~umask; an existing file keeps its mode.
    struct stat existing {};
    if (stat(entry.shown_path.c_str(), &existing) != 0) spec.mode = 0644;
    if (auto made = fs::make_dirs_owned(fs::parent_path(entry.shown_path), uid, gid); !made) {
      entries.push_back(std::move(entry));
      return void(error = FileReply::from(made.error()));
    }
    auto file = fs::AtomicFile::open(entry.shown_path, spec);
    if (!file) {
      entries.push_back(std::move(entry));
      return void(error = FileReply::from(file.error()));
    }
    entry.file.emplace(std::move(file.value()));
    // On the temp file: the file appears with its metadata or not at all.
    if (auto s = entry.file->write_xattrs(kE2BMetadataPrefix, op.e2b_metadata); !s) {
      entries.push_back(std::move(entry));
      return void(error = FileReply::from(s.error()));
    }
    entry.file->enable_direct_io();
    entries.push_back(std::move(entry));
  }

  // Bad path or owner/group in a metadata part: the client's fault.
  void metadata_error(const fs::Error& e) {
    if (e.kind == fs::ErrorKind::bad_request)
      error = FileReply::error(400, codes::kInvalidFileMetadata, e.message);
    else
      error = FileReply::from(e);
  }
};

class Upload;

// One pool job: the upload's write steps, in order, with the disk state.
struct WriteJob {
  WorkGate::Ticket work;
  Link<Upload> upload;
  std::unique_ptr<DiskState> disk;
  std::vector<WriteOp> ops;
  size_t bytes = 0;
};

// What an upload that went leaves behind: thrown away on the pool (inside
// an isolated session's mount namespace, for its uploads).
void abort_on_pool(uv_loop_t* loop, std::unique_ptr<DiskState> disk,
                   std::shared_ptr<const pty::MountNamespace> mount) {
  if (!disk || disk->entries.empty()) return;
  struct AbortJob {
    std::unique_ptr<DiskState> disk;
    std::shared_ptr<const pty::MountNamespace> mount;
  };
  fs::queue_job<AbortJob>(
      loop, std::make_unique<AbortJob>(AbortJob{std::move(disk), std::move(mount)}),
      [](AbortJob& j) {
        pty::MountScope scope(j.mount.get());
        if (scope.error()) return;
        WriteOp op = WriteOp::make(WriteOp::abort);
        j.disk->run(op);
      },
      [](AbortJob&, int) {});
}

class Upload final : public http::Source {
 public:
  // E2B's POST /files: what the query named.
  struct E2B {
    std::optional<std::string> path;
    std::string user;
    std::map<std::string, std::string> metadata;  // X-Metadata-*: every file gets it
  };

  Upload(const FileService& svc, Exchange& ex, std::optional<E2B> e2b = std::nullopt)
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
      return send_reply(ex_, FileReply{200, "application/json", envd_upload_reply(written, e2b_->metadata), {}});
    }
    send_reply(ex_, failure_ ? *failure_ : FileReply::empty());
  }

  FileService svc_;  // a copy: an isolated session's may go first
  Exchange& ex_;
  std::optional<E2B> e2b_;
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

void upload_head(FileService& svc, Exchange& ex) {
  auto up = std::make_unique<Upload>(svc, ex);
  Upload& u = *up;
  ex.attach(std::move(up));
  ex.on_complete = [&u](Exchange&) { u.body_complete(); };
  u.begin(ex.request());
}

}  // namespace

void envd_upload_head(FileService& svc, Exchange& ex, std::optional<std::string> path, std::string user,
                      std::map<std::string, std::string> metadata) {
  auto up = std::make_unique<Upload>(svc, ex, Upload::E2B{std::move(path), std::move(user), std::move(metadata)});
  Upload& u = *up;
  ex.attach(std::move(up));
  ex.on_complete = [&u](Exchange&) { u.body_complete(); };
  u.begin(ex.request());
}

void add_upload_route(RouteTable& routes, const std::string& prefix, const FileServiceFor& service) {
  routes.add_streaming(
      "POST", prefix + "/files/upload",
      [service](Exchange& ex) {
        if (FileService* svc = service(ex)) upload_head(*svc, ex);
      },
      [](Exchange&) {});
}

}  // namespace execd::api
