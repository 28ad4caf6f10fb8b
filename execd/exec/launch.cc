// execd/exec/launch: see header.
#include "execd/exec/launch.h"

#include "execd/exec/registry.h"
#include "execd/http/awaiter.h"
#include "execd/limits.h"
#include "fs/pool_job.h"

namespace execd::exec {

namespace codes = protocol::codes;
using protocol::ApiError;

void RunStart::refuse(http::Exchange& client, const ApiError& why) {
  client.respond_error(why.status, why.code, why.message);
}

struct LaunchPath::Launch : http::Awaitable {
  std::unique_ptr<RunStart> start;
  std::string id;
  // The client while the launch runs on from its request (no wait yet);
  // afterwards only the wait's link says whether it is still there.
  http::Exchange* direct = nullptr;
  bool had_client = false;
  bool goes_on_without_client = false;
  std::optional<ApiError> error;
  std::unique_ptr<ChangeTracker> tracker;

  http::Exchange* client() const { return direct ? direct : exchange(); }
  // Makes the client (if any) wait for what comes next.
  void wait() {
    if (direct) http::await(*direct, *this);
    direct = nullptr;
  }
  bool withdrawn() const { return had_client && !goes_on_without_client && !client(); }
};

std::optional<ApiError> LaunchPath::launch(http::Exchange* client, ExecutionSpec spec, std::unique_ptr<RunStart> start,
                                           bool goes_on_without_client, uint64_t log_limit) {
  auto l = std::make_unique<Launch>();
  l->start = std::move(start);
  l->direct = client;
  l->had_client = client != nullptr;
  l->goes_on_without_client = goes_on_without_client;
  // 1. admission
  std::optional<ApiError> refusal;
  if (!executions_.accepting()) refusal = ApiError{503, std::string(codes::kRuntimeError), "execd is shutting down"};
  else if (auto r = refuse_past(executions_.running(), settings_.max_running, "running executions", "max-running"))
    refusal = ApiError{r->status, r->code, r->message};
  else refusal = l->start->admission();
  if (refusal) {
    if (client) l->start->refuse(*client, *refusal);
    return refusal;
  }
  // 2. the id
  Execution& e = executions_.create(std::move(spec), log_limit);
  l->id = e.id();
  // 3. preparation
  if (!l->start->prepare_blocks()) {
    // Nothing that blocks: prepared here, which saves two thread hops.
    l->error = l->start->prepare();
    prepared(std::move(l));
    return std::nullopt;
  }
  l->wait();
  struct Job {
    LaunchPath* path;
    std::unique_ptr<Launch> l;
  };
  fs::queue_job<Job>(
      executions_.loop(), std::make_unique<Job>(Job{this, std::move(l)}),
      [](Job& j) { j.l->error = j.l->start->prepare(); }, [](Job& j, int) { j.path->prepared(std::move(j.l)); });
  return std::nullopt;
}

void LaunchPath::prepared(std::unique_ptr<Launch> l) {
  Execution* e = executions_.find(l->id);
  if (!e || !e->starting()) return;  // cannot happen: a reserved execution stays until it starts
  if (l->withdrawn()) return e->discard(ApiError{499, std::string(codes::kRuntimeError), "the client left"});
  if (!l->error && !executions_.accepting())
    l->error = ApiError{503, std::string(codes::kRuntimeError), "execd is shutting down"};
  if (l->error) return refuse(*l, *l->error);
  // 4. track_changes: the watches first, so that nothing the run does escapes them.
  std::vector<std::string> roots = e->spec().track_changes;
  if (roots.empty()) return tracked(std::move(l));
  l->wait();
  watch::MountRef mount = l->start->track_mount();
  auto held = std::make_shared<std::unique_ptr<Launch>>(std::move(l));
  ChangeTracker::open(
      watches_, std::move(roots), settings_.track,
      [this, held](std::unique_ptr<ChangeTracker> tracker, std::optional<ApiError> err) {
        std::unique_ptr<Launch> l = std::move(*held);
        if (err) {
          err->message = "track_changes: " + err->message;
          l->error = std::move(err);
        }
        l->tracker = std::move(tracker);
        tracked(std::move(l));
      },
      std::move(mount));
}

void LaunchPath::tracked(std::unique_ptr<Launch> l) {
  Execution* e = executions_.find(l->id);
  if (!e || !e->starting()) return;
  if (l->withdrawn()) return e->discard(ApiError{499, std::string(codes::kRuntimeError), "the client left"});
  if (l->error) return refuse(*l, *l->error);
  // 5. the kind's last word, then the first reader
  if (auto why = l->start->recheck()) return refuse(*l, *why);
  l->start->fill_spec(e->reserved_spec());
  if (l->tracker) e->track(std::move(l->tracker));
  http::Exchange* client = l->client();
  bool stream_first = !l->start->start_failure_refuses();
  auto attach_stream = [&] {
    if (!client) return;
    if (auto format = l->start->stream_format(*client))
      client->attach(std::make_unique<ExecutionReader>(*client, *e, ExecutionReader::Role::original, std::move(format),
                                                       0, 0, l->start->stream_headers(*e)));
  };
  if (stream_first) attach_stream();
  // 6. the runner
  std::string error;
  std::unique_ptr<Runner> runner = l->start->start(*e, error);
  if (!runner) {
    if (client && !stream_first) l->start->refuse(*client, ApiError{500, std::string(codes::kRuntimeError), error});
    return e->fail_start(error);
  }
  if (!stream_first) attach_stream();
  e->start(std::move(runner));
  l->start->started(*e, client);
}

void LaunchPath::refuse(Launch& l, const ApiError& why) {
  if (http::Exchange* c = l.client()) l.start->refuse(*c, why);
  if (Execution* e = executions_.find(l.id)) e->discard(why);
}

}  // namespace execd::exec
