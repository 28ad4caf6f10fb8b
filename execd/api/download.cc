// execd/api/download: GET /files/download. The query decides between the
// file's lines (?offset=&limit=, execd/files/line_download) and the file
// whole or one range of it (execd/files/download); E2B's GET /files
// (api/envd/files) comes here through envd_download.
#include "execd/api/api.h"
#include "execd/api/envd/files.h"
#include "execd/files/download.h"
#include "execd/files/line_download.h"
#include "protocol/errors.h"
#include "protocol/file_requests.h"
#include "protocol/query_values.h"

namespace execd::api {

namespace codes = protocol::codes;
using http::Exchange;

namespace {

std::optional<std::string_view> optional_query(const Exchange& ex, std::string_view name) {
  const std::string* v = protocol::query_value(ex.query, name);
  return v ? std::optional<std::string_view>(*v) : std::nullopt;
}

void handle_download(FileService& svc, Exchange& ex) {
  const std::string* path = protocol::query_value(ex.query, "path");
  if (!path) return ex.respond_error(400, codes::kMissingQuery, "missing query parameter 'path'");
  const std::string* range_header = ex.header("range");
  std::string error;
  auto lines = protocol::parse_line_range_params(
      optional_query(ex, "offset"), optional_query(ex, "limit"),
      range_header ? std::optional<std::string_view>(*range_header) : std::nullopt, error);
  if (!lines) return send_reply(ex, FileReply::from(fs::Error{fs::ErrorKind::bad_request, error}));
  if (lines->requested) return files::send_lines(svc, ex, *path, *lines);
  files::send_file(svc, ex, *path);
}

}  // namespace

void envd_download(FileService& svc, Exchange& ex, std::string path, std::string user) {
  files::send_envd_file(svc, ex, std::move(path), std::move(user));
}

void add_download_route(RouteTable& routes, const std::string& prefix, const FileServiceFor& service) {
  routes.add("GET", prefix + "/files/download", [service](Exchange& ex) {
    if (FileService* svc = service(ex)) handle_download(*svc, ex);
  });
}

}  // namespace execd::api
