// execd/api/metrics: GET /metrics and GET /metrics/watch; the sampling is
// execd/metrics/service's.
#include "execd/api/api.h"
#include "execd/metrics/service.h"

namespace execd::api {

void add_metrics_routes(RouteTable& routes, metrics::MetricsService& metrics) {
  routes.add("GET", "/metrics", [&metrics](http::Exchange& ex) { metrics.answer(ex); });
  routes.add("GET", "/metrics/watch", [&metrics](http::Exchange& ex) {
    ex.begin_chunked(200, {"Content-Type: text/event-stream", "Cache-Control: no-cache", "X-Accel-Buffering: no"});
    metrics.watch(ex);
  });
}

}  // namespace execd::api
