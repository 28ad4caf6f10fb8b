// execd/api/api: the route groups the daemon wires up that have no header
// of their own. One file per API area (commands, sessions, pty, files,
// upload, download, archive, metrics, journal, proxy, code, watch,
// pause); each decodes requests (protocol/), calls the owners (exec/,
// runners/, sessions/, files/, pty/ or fs/), and encodes answers. No socket
// or libuv stream code here: responses go through http::Exchange.
#pragma once

#include <functional>
#include <string>

#include "execd/files/file_identities.h"
#include "execd/files/file_jobs.h"
#include "execd/context.h"
#include "execd/routes.h"

namespace execd::metrics {
class MetricsService;
}

namespace execd::api {

// The file owners (execd/files) the handlers here and in api/envd name
// unqualified.
using files::FileIdentities;
using files::FileReply;
using files::FileService;
using files::dump_json;
using files::journal_change;
using files::make_working_dir;
using files::run_blocking;
using files::run_file_job;
using files::send_reply;
using files::to_permission_spec;
using files::WorkingDir;

// The file routes under `prefix` ("" or "/v1/filesystem/:uid/:gid"), each
// asking `service` which FileService serves the request (nullptr: it has
// answered the refusal).
using FileServiceFor = std::function<FileService*(http::Exchange&)>;
void add_file_routes(RouteTable& routes, const std::string& prefix, const FileServiceFor& service);
void add_upload_route(RouteTable& routes, const std::string& prefix, const FileServiceFor& service);
void add_download_route(RouteTable& routes, const std::string& prefix, const FileServiceFor& service);
// GET and POST /files/archive (execd/api/archive).
void add_archive_routes(RouteTable& routes, FileService& files);
// GET /metrics: the Go daemon's body plus "state_dir" (the figures
// /activity has, from `budget`); GET /metrics/watch: the Go daemon's lines.
void add_metrics_routes(RouteTable& routes, metrics::MetricsService& metrics, exec::StateBudget& budget);

}  // namespace execd::api
