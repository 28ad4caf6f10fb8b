// execd/metrics/service: the samples behind GET /metrics and GET
// /metrics/watch (execd/api/metrics; upstream's JSON shape). The sandbox is measured by MetricsSampler (the cgroup first,
// /proc where no limit applies), always on the threadpool, one sample at a
// time. While anyone is interested (a request in the last 30 s, or a
// watcher) a sample is taken every second in the background, so /metrics
// answers from a fresh sample at once instead of taking a second per call
// as upstream does; the first call after a quiet spell waits for two quick
// readings (the CPU percentage needs two).
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "execd/context.h"
#include "execd/http/exchange.h"
#include "execd/link.h"
#include "execd/metrics/sampler.h"

namespace execd::metrics {

class MetricsWatch;
struct MetricsWaiter;

class MetricsService {
 public:
  static constexpr uint64_t kIntervalMs = 1000;
  static constexpr uint64_t kFreshMs = 1500;
  static constexpr uint64_t kInterestMs = 30000;
  static constexpr uint64_t kWatchIntervalMs = 2000;

  explicit MetricsService(const Context& ctx);
  ~MetricsService();
  void close();

  // Answers `ex` with the latest sample (now, or once one is taken), as
  // `body` writes it (upstream's shape by default; execd's /metrics adds
  // the state directory's figures, E2B's /metrics has its own shape).
  using BodyFn = std::function<std::string(const MetricsSample&)>;
  void answer(http::Exchange& ex, BodyFn body = nullptr);
  // GET /metrics/watch, its head sent: a line per sample from now on.
  void watch(http::Exchange& ex);
  void add_watcher(MetricsWatch& w);
  void remove_watcher(MetricsWatch& w);
  const std::optional<MetricsSample>& latest() const { return latest_; }

 private:
  void start_sampling(bool twice);
  void sampled(MetricsSample s);
  void on_timer();

  const Context& ctx_;
  MetricsSampler sampler_;
  std::optional<MetricsSample> latest_;
  uint64_t latest_ms_ = 0, last_interest_ms_ = 0;
  bool in_flight_ = false, closed_ = false;
  uv_timer_t timer_;
  std::vector<std::unique_ptr<MetricsWaiter>> waiters_;
  std::vector<MetricsWatch*> watchers_;
};

std::string metrics_body(const MetricsSample& s);

}  // namespace execd::metrics
