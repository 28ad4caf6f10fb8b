// execd/api/isolated_layers: see header.
#include "execd/api/isolated_layers.h"

#include <atomic>
#include <memory>

#include <nlohmann/json.hpp>

#include "execd/http/awaiter.h"
#include "execd/http/connection.h"
#include "execd/link.h"
#include "protocol/errors.h"

namespace execd::api {

namespace codes = protocol::codes;
using http::Exchange;

namespace {

// More changes than this and the answer says "truncated" (the client then
// takes the tarball, which has everything).
constexpr size_t kMaxDiffChanges = 100000;
// Compressed bytes one pool step produces.
constexpr size_t kPieceBytes = 1 << 20;

struct DiffJob : http::Awaitable {
  WorkGate::Ticket work;
  LayerSet set;
  fs::LayerDiff diff;
  void client_gone() override { work.gate->cancel(work); }
};

void handle_diff(LayerScope& scope, Exchange& ex) {
  auto* j = new DiffJob;
  if (!scope.find(ex, j->set)) {
    delete j;
    return;
  }
  j->work.req.data = j;
  int rc = scope.gate.queue(
      scope.loop, j->work,
      [](uv_work_t* w) {
        auto* j = static_cast<DiffJob*>(w->data);
        j->diff = fs::diff_layers(j->set.layers, kMaxDiffChanges);
      },
      [](uv_work_t* w, int status) {
        std::unique_ptr<DiffJob> j(static_cast<DiffJob*>(w->data));
        Exchange* ex = j->exchange();
        if (!ex || status == UV_ECANCELED) return;
        if (status != 0 || j->diff.error)
          return ex->respond_error(500, codes::kRuntimeError,
                                   "diff: " + (j->diff.error ? *j->diff.error : std::string(uv_strerror(status))));
        nlohmann::ordered_json out;
        out["session_id"] = j->set.session;
        nlohmann::ordered_json changes = nlohmann::ordered_json::array();
        for (const auto& c : j->diff.changes) {
          nlohmann::ordered_json e;
          e["path"] = c.path;
          e["change"] = c.change;
          e["type"] = c.type;
          if (c.type == "file") e["size"] = c.size;
          changes.push_back(std::move(e));
        }
        out["changes"] = std::move(changes);
        out["truncated"] = j->diff.truncated;
        ex->respond_json(200, out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
      });
  if (rc != 0) {
    delete j;
    return ex.respond_error(500, codes::kRuntimeError, std::string("cannot queue work: ") + uv_strerror(rc));
  }
  http::await(ex, *j);
}

// The tarball: one pool step at a time, the next only once the client
// has taken the last piece. The tarball (its open files, its zlib state)
// travels with the step and comes back to the stream.
class CommitStream;

struct CommitStep {
  WorkGate::Ticket work;
  std::unique_ptr<fs::LayerTarball> tar;
  std::string piece;
  bool more = false;
  Link<CommitStream> stream;
};

class CommitStream final : public http::Source {
 public:
  CommitStream(Exchange& ex, WorkGate& gate, uv_loop_t* loop, std::unique_ptr<fs::LayerTarball> tar)
      : ex_(ex), gate_(gate), loop_(loop), tar_(std::move(tar)) {}
  Link<CommitStep> step;

  void queue_step() {
    auto* s = new CommitStep;
    s->work.req.data = s;
    s->tar = std::move(tar_);
    link(*s, s->stream, *this, step);
    int rc = gate_.queue(loop_, s->work, run_step, step_done);
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

 private:
  static void run_step(uv_work_t* w) {
    auto* s = static_cast<CommitStep*>(w->data);
    try {
      s->more = s->tar->next(s->piece, kPieceBytes);
    } catch (const std::exception&) {  // bad_alloc: never across the pool
      s->more = false;
    }
  }

  static void step_done(uv_work_t* w, int status) {
    std::unique_ptr<CommitStep> s(static_cast<CommitStep*>(w->data));
    CommitStream* self = s->stream.get();
    if (!self) return;  // the client left: the tarball and its files go with the step
    s->stream.cut();
    if (status != 0) return self->fail(std::string("commit: ") + uv_strerror(status));
    if (s->tar->error()) return self->fail("commit: " + *s->tar->error());
    self->tar_ = std::move(s->tar);
    self->deliver(std::move(s->piece), s->more);
  }

  void deliver(std::string piece, bool more) {
    if (!head_sent_) {
      head_sent_ = true;
      ex_.begin_chunked(200, {"Content-Type: application/gzip",
                              "Content-Disposition: attachment; filename=\"upper.tar.gz\""},
                        false);
    }
    if (!more) return ex_.end(std::move(piece));
    if (piece.empty() || ex_.send(std::move(piece))) return queue_step();
    waiting_for_client_ = true;
  }

  // Before the head: a 500. After it: the connection is cut, so a truncated
  // archive never reads as a whole one.
  void fail(const std::string& why) {
    if (!head_sent_) return ex_.respond_error(500, codes::kRuntimeError, why);
    ex_.connection().close();
  }

  Exchange& ex_;
  WorkGate& gate_;
  uv_loop_t* loop_;
  std::unique_ptr<fs::LayerTarball> tar_;
  bool head_sent_ = false, waiting_for_client_ = false;
};

void handle_commit(LayerScope& scope, Exchange& ex) {
  LayerSet set;
  if (!scope.find(ex, set)) return;
  auto stream =
      std::make_unique<CommitStream>(ex, scope.gate, scope.loop, std::make_unique<fs::LayerTarball>(set.layers));
  CommitStream* s = stream.get();
  ex.attach(std::move(stream));
  s->queue_step();
}

}  // namespace

void add_layer_routes(RouteTable& routes, const std::string& session_prefix, LayerScope scope) {
  auto shared = std::make_shared<LayerScope>(std::move(scope));
  routes.add("GET", session_prefix + "/diff", [shared](Exchange& ex) { handle_diff(*shared, ex); });
  routes.add("POST", session_prefix + "/commit", [shared](Exchange& ex) { handle_commit(*shared, ex); });
}

}  // namespace execd::api
