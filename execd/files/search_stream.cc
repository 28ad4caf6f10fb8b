// execd/files/search_stream: see header.
#include "execd/files/search_stream.h"

#include <memory>
#include <optional>

#include "execd/files/file_jobs.h"
#include "execd/http/awaiter.h"
#include "execd/http/connection.h"
#include "execd/link.h"
#include "execd/work_gate.h"
#include "fs/ops.h"
#include "protocol/errors.h"

namespace execd::files {

namespace codes = protocol::codes;
using http::Exchange;

namespace {

class SearchStream;

struct SearchStep {
  WorkGate::Ticket work;
  std::unique_ptr<fs::SearchWalk> walk;
  std::atomic<bool> cancelled{false};
  std::string json;  // the step's matches, comma-separated
  size_t count = 0;
  bool more = false;
  Link<SearchStream> stream;
};

class SearchStream final : public http::Source {
 public:
  static constexpr size_t kFilesPerStep = 1000;
  static constexpr size_t kEntriesPerStep = 20000;

  SearchStream(Exchange& ex, const FileService& svc, std::unique_ptr<fs::SearchWalk> walk)
      : ex_(ex), svc_(svc), walk_(std::move(walk)) {}
  ~SearchStream() override {
    if (SearchStep* s = step.get()) s->cancelled = true;
  }
  Link<SearchStep> step;

  void queue_step() {
    auto* s = new SearchStep;
    s->work.req.data = s;
    s->walk = std::move(walk_);
    link(*s, s->stream, *this, step);
    int rc = svc_.queue(s->work, run_step, step_done);
    if (rc != 0) {
      delete s;
      fail(std::string("cannot queue work: ") + uv_strerror(rc));
    }
  }

  void proceed() override {
    if (waiting_for_client_) {
      waiting_for_client_ = false;
      queue_step();
    }
  }
  void stop() override {
    if (SearchStep* s = step.get()) s->cancelled = true;
  }

 private:
  static void run_step(uv_work_t* w) {
    auto* s = static_cast<SearchStep*>(w->data);
    std::vector<fs::FileInfo> files;
    try {
      s->more = s->walk->next(files, kFilesPerStep, kEntriesPerStep, &s->cancelled);
      for (const fs::FileInfo& f : files) {
        if (!s->json.empty()) s->json += ',';
        s->json += dump_json(nlohmann::json(f));
      }
      s->count = files.size();
    } catch (const std::exception&) {  // bad_alloc: end the walk, never cross the pool
      s->more = false;
    }
  }

  static void step_done(uv_work_t* w, int status) {
    std::unique_ptr<SearchStep> s(static_cast<SearchStep*>(w->data));
    SearchStream* self = s->stream.get();
    if (!self) return;  // the client left: the walk and its descriptors go with the step
    s->stream.cut();
    if (status != 0) return self->fail(std::string("search: ") + uv_strerror(status));
    self->walk_ = std::move(s->walk);
    self->deliver(*s);
  }

  void deliver(SearchStep& s) {
    std::string piece;
    if (!head_sent_ && !s.more) {  // the whole answer in one step
      return ex_.respond(200, kJson, "[" + s.json + "]");
    }
    if (!head_sent_) {
      head_sent_ = true;
      ex_.begin_chunked(200, {std::string("Content-Type: ") + std::string(kJson)}, false);
      piece = "[";
    } else if (any_ && s.count) {
      piece = ",";
    }
    any_ |= s.count > 0;
    piece += s.json;
    if (!s.more) return ex_.end(piece + "]");
    if (piece.empty() || ex_.send(std::move(piece))) return queue_step();
    waiting_for_client_ = true;
  }

  // Before the head: a 500. After it: the connection is cut, since a cut
  // array must not read as a complete one.
  void fail(const std::string& why) {
    if (!head_sent_) return ex_.respond_error(500, codes::kRuntimeError, why);
    ex_.connection().close();
  }

  static constexpr std::string_view kJson = "application/json; charset=utf-8";
  Exchange& ex_;
  FileService svc_;  // a copy: an isolated session's may go first
  std::unique_ptr<fs::SearchWalk> walk_;
  bool head_sent_ = false, any_ = false, waiting_for_client_ = false;
};

// Opening the root (expanding, stat, the pattern) is itself disk work.
struct SearchOpen : http::Awaitable {
  explicit SearchOpen(const FileService& s) : svc(s) {}
  WorkGate::Ticket work;
  FileService svc;
  std::string root, pattern;
  std::unique_ptr<fs::SearchWalk> walk;
  std::optional<fs::Error> error;
  void client_gone() override { work.gate->cancel(work); }
};

}  // namespace

void send_search(const FileService& svc, Exchange& ex, std::string root, std::string pattern) {
  auto* o = new SearchOpen(svc);
  o->work.req.data = o;
  o->root = std::move(root);
  o->pattern = std::move(pattern);
  int rc = svc.queue(
      o->work,
      [](uv_work_t* w) {
        auto* o = static_cast<SearchOpen*>(w->data);
        auto walk = fs::SearchWalk::start(o->root, o->pattern, fs::process_env_lookup());
        if (walk) o->walk = std::move(walk.value());
        else o->error = walk.error();
      },
      [](uv_work_t* w, int status) {
        std::unique_ptr<SearchOpen> o(static_cast<SearchOpen*>(w->data));
        Exchange* ex = o->exchange();
        if (!ex || status == UV_ECANCELED) return;
        if (status != 0)
          return ex->respond_error(500, codes::kRuntimeError, std::string("search: ") + uv_strerror(status));
        if (o->error) return send_reply(*ex, FileReply::from(*o->error));
        auto stream = std::make_unique<SearchStream>(*ex, o->svc, std::move(o->walk));
        SearchStream* s = stream.get();
        ex->attach(std::move(stream));
        s->queue_step();
      });
  if (rc != 0) {
    delete o;
    return ex.respond_error(500, codes::kRuntimeError, std::string("cannot queue work: ") + uv_strerror(rc));
  }
  http::await(ex, *o);
}

}  // namespace execd::files
