// execd/metrics/service: see header.
#include "execd/metrics/service.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "execd/http/awaiter.h"
#include "execd/http/connection.h"
#include "protocol/metrics_json.h"
#include "fs/pool_job.h"

namespace execd::metrics {

std::string metrics_body(const MetricsSample& s) {
  protocol::MetricsJson j;
  j.cpu_count = s.cpu_count;
  j.cpu_used_pct = s.cpu_used_pct;
  j.mem_total_mib = s.mem_total_mib;
  j.mem_used_mib = s.mem_used_mib;
  j.timestamp_ms = s.timestamp_ms;
  return protocol::metrics_json(j);
}

// A /metrics request waiting for the next sample.
struct MetricsWaiter : http::Awaitable {
  MetricsService::BodyFn body = metrics_body;
};

// GET /metrics/watch: one line per sample; a client that is behind skips
// samples (a newer one supersedes them) instead of making execd queue them.
class MetricsWatch final : public http::Source {
 public:
  MetricsWatch(http::Exchange& ex, MetricsService& svc) : ex_(ex), svc_(&svc) {}
  ~MetricsWatch() override { stop(); }
  void offer(const MetricsSample& s, uint64_t now) {
    if (behind_ || now - last_sent_ms_ + 50 < MetricsService::kWatchIntervalMs) return;
    last_sent_ms_ = now;
    behind_ = !ex_.send(metrics_body(s) + "\n");
  }
  void proceed() override { behind_ = false; }
  void stop() override {
    if (svc_) svc_->remove_watcher(*this);
    svc_ = nullptr;
  }
  void service_gone() { svc_ = nullptr; }

 private:
  http::Exchange& ex_;
  MetricsService* svc_;
  uint64_t last_sent_ms_ = 0;
  bool behind_ = false;
};

namespace {
struct SampleJob {
  MetricsService* svc;
  MetricsSampler* sampler;
  bool twice;
  MetricsSample result;
};
}  // namespace

MetricsService::MetricsService(const Context& ctx) : ctx_(ctx) {
  uv_timer_init(ctx.loop, &timer_);
  timer_.data = this;
}

MetricsService::~MetricsService() = default;

void MetricsService::close() {
  closed_ = true;
  for (MetricsWatch* w : watchers_) w->service_gone();
  watchers_.clear();
  uv_timer_stop(&timer_);
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
}

void MetricsService::answer(http::Exchange& ex, BodyFn body) {
  if (!body) body = metrics_body;
  uint64_t now = uv_now(ctx_.loop);
  bool quiet = now - last_interest_ms_ > kInterestMs || !latest_;
  last_interest_ms_ = now;
  if (latest_ && now - latest_ms_ <= kFreshMs) {
    ex.respond_json(200, body(*latest_));
  } else {
    auto w = std::make_unique<MetricsWaiter>();
    w->body = std::move(body);
    http::await(ex, *w);
    waiters_.push_back(std::move(w));
    start_sampling(quiet);
  }
  if (!uv_is_active(reinterpret_cast<uv_handle_t*>(&timer_)) && !closed_)
    uv_timer_start(&timer_, [](uv_timer_t* t) { static_cast<MetricsService*>(t->data)->on_timer(); }, kIntervalMs,
                   kIntervalMs);
}

void MetricsService::add_watcher(MetricsWatch& w) {
  watchers_.push_back(&w);
  last_interest_ms_ = uv_now(ctx_.loop);
  if (latest_) w.offer(*latest_, uv_now(ctx_.loop));
  else start_sampling(true);
  if (!uv_is_active(reinterpret_cast<uv_handle_t*>(&timer_)) && !closed_)
    uv_timer_start(&timer_, [](uv_timer_t* t) { static_cast<MetricsService*>(t->data)->on_timer(); }, kIntervalMs,
                   kIntervalMs);
}

void MetricsService::remove_watcher(MetricsWatch& w) {
  watchers_.erase(std::remove(watchers_.begin(), watchers_.end(), &w), watchers_.end());
}

void MetricsService::on_timer() {
  uint64_t now = uv_now(ctx_.loop);
  if (watchers_.empty() && now - last_interest_ms_ > kInterestMs) {
    uv_timer_stop(&timer_);  // nobody is looking: no background work
    return;
  }
  start_sampling(false);
}

void MetricsService::start_sampling(bool twice) {
  if (in_flight_ || closed_) return;
  in_flight_ = true;
  fs::queue_job<SampleJob>(
      ctx_.loop, std::make_unique<SampleJob>(SampleJob{this, &sampler_, twice, {}}),
      [](SampleJob& j) {
        if (j.twice) {
          // The CPU percentage compares two readings: take a short first one.
          j.sampler->sample();
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
        j.result = j.sampler->sample();
      },
      [](SampleJob& j, int) { j.svc->sampled(j.result); });
}

void MetricsService::sampled(MetricsSample s) {
  in_flight_ = false;
  latest_ = s;
  latest_ms_ = uv_now(ctx_.loop);
  auto waiting = std::move(waiters_);
  waiters_.clear();
  for (auto& w : waiting)
    if (http::Exchange* ex = w->exchange()) ex->respond_json(200, w->body(s));
  for (MetricsWatch* w : std::vector<MetricsWatch*>(watchers_)) w->offer(s, latest_ms_);
}

void MetricsService::watch(http::Exchange& ex) {
  auto watch = std::make_unique<MetricsWatch>(ex, *this);
  MetricsWatch& w = *watch;
  ex.attach(std::move(watch));
  add_watcher(w);
}

}  // namespace execd::metrics
