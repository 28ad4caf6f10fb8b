// execd/api/watch: the file-change feed route, GET /files/watch (see
// watch.cc). The watches themselves are execd/watch's.
#pragma once

#include "execd/routes.h"
#include "execd/watch/watch.h"

namespace execd::api {

void add_watch_routes(RouteTable& routes, watch::Hub& hub);

}  // namespace execd::api
