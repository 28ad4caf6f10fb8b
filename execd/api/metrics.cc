// execd/api/metrics: GET /metrics and GET /metrics/watch; the sampling is
// execd/metrics/service's. /metrics is the Go daemon's body with one object
// added, "state_dir" (what execd keeps in --state-dir against its budget,
// as /activity shows it): clients that decode the Go model ignore a key
// they do not know.
#include <nlohmann/json.hpp>

#include "execd/api/pause.h"
#include "execd/api/api.h"
#include "execd/metrics/service.h"

namespace execd::api {

void add_metrics_routes(RouteTable& routes, metrics::MetricsService& metrics, exec::StateBudget& budget) {
  routes.add("GET", "/metrics", [&metrics, &budget](http::Exchange& ex) {
    // Built when the sample is answered (now, or once one is taken), so the
    // figures are as fresh as the sample.
    metrics.answer(ex, [&budget](const metrics::MetricsSample& s) {
      std::string body = metrics::metrics_body(s);
      body.pop_back();  // the Go object's closing brace
      body += ",\"state_dir\":";
      body += state_dir_json(budget).dump();
      body += '}';
      return body;
    });
  });
  routes.add("GET", "/metrics/watch", [&metrics](http::Exchange& ex) {
    ex.begin_chunked(200, {"Content-Type: text/event-stream", "Cache-Control: no-cache", "X-Accel-Buffering: no"});
    metrics.watch(ex);
  });
}

}  // namespace execd::api
