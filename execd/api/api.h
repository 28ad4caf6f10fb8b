// execd/api/api: the route groups the daemon wires up that have no header
// of their own. One file per API area (commands, sessions, pty, files,
// upload, download, metrics, journal, proxy, code); each decodes requests
// (protocol/), calls exec/, runners/, pty/ or fs/, and encodes answers. No
// socket or libuv stream code here: responses go through http::Exchange.
#pragma once

#include "execd/api/file_jobs.h"
#include "execd/context.h"
#include "execd/routes.h"

namespace execd::api {

class MetricsService;

void add_file_routes(RouteTable& routes, FileService& files);
void add_upload_route(RouteTable& routes, FileService& files);
void add_download_route(RouteTable& routes, FileService& files);
// The same routes under `prefix` (an isolated session's), each request
// finding its service through `scope`.
void add_file_routes_at(RouteTable& routes, const std::string& prefix, FileScope scope);
void add_upload_route_at(RouteTable& routes, const std::string& prefix, FileScope scope);
void add_download_route_at(RouteTable& routes, const std::string& prefix, FileScope scope);
void add_metrics_routes(RouteTable& routes, MetricsService& metrics);

}  // namespace execd::api
