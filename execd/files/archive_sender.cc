// execd/files/archive_sender: see header.
#include "execd/files/archive_sender.h"

#include <spdlog/spdlog.h>

#include <memory>
#include <optional>

#include "execd/files/download_headers.h"
#include "execd/files/file_jobs.h"
#include "execd/http/awaiter.h"
#include "execd/http/connection.h"
#include "execd/link.h"
#include "execd/work_gate.h"
#include "fs/paths.h"
#include "protocol/errors.h"

namespace execd::files {

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

}  // namespace

void send_archive(FileService& svc, Exchange& ex, std::string path, fs::ArchiveFormat format) {
  auto* w = new OpenArchive;
  w->work.req.data = w;
  w->path = std::move(path);
  w->format = format;
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

}  // namespace execd::files
