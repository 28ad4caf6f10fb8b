// execd/files/line_download: see header.
#include "execd/files/line_download.h"

#include <spdlog/spdlog.h>

#include <memory>
#include <optional>

#include "execd/files/file_jobs.h"
#include "execd/http/awaiter.h"
#include "execd/http/connection.h"
#include "execd/link.h"
#include "execd/work_gate.h"
#include "fs/expand.h"
#include "fs/paths.h"
#include "fs/line_range.h"
#include "protocol/errors.h"

namespace execd::files {

namespace codes = protocol::codes;
using http::Exchange;

namespace {

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

}  // namespace

void send_lines(FileService& svc, Exchange& ex, const std::string& path, protocol::LineRangeParams params) {
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

}  // namespace execd::files
