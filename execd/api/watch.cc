// execd/api/watch: GET /files/watch?path=&recursive=&since= — the
// file-change feed. Thin: the query is decoded by protocol/watch, the watch
// is found or made by the hub (execd/watch), and the feed is
// execd/files/watch_feed's (what its lines say is there).
#include "execd/api/watch.h"

#include "execd/files/watch_feed.h"
#include "execd/http/awaiter.h"
#include "protocol/errors.h"
#include "protocol/query_values.h"
#include "protocol/watch.h"

namespace execd::api {

namespace codes = protocol::codes;
using http::Exchange;

namespace {

struct OpenWait : http::Awaitable {};

void handle_watch(watch::Hub& hub, Exchange& ex) {
  std::string error;
  auto q = protocol::decode_watch_query(protocol::query_value(ex.query, "path"),
                                        protocol::query_value(ex.query, "recursive"),
                                        protocol::query_value(ex.query, "since"), error);
  if (!q) return ex.respond_error(400, error.rfind("missing", 0) == 0 ? codes::kMissingQuery : codes::kInvalidRequestBody,
                                  error);
  auto wait = std::make_shared<OpenWait>();
  http::await(ex, *wait);
  hub.open(q->path, q->recursive, [wait, &hub, since = q->since](watch::Watch* w, std::optional<protocol::ApiError> err) {
    Exchange* ex = wait->exchange();
    if (!ex) {
      if (w) w->release();  // the client left while the watch was being made
      return;
    }
    if (err) return ex->respond_error(err->status, err->code, err->message);
    files::start_watch_feed(*ex, hub, *w, since);
  });
}

}  // namespace

void add_watch_routes(RouteTable& routes, watch::Hub& hub) {
  routes.add("GET", "/files/watch", [&hub](Exchange& ex) { handle_watch(hub, ex); });
}

}  // namespace execd::api
