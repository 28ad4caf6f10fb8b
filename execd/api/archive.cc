// execd/api/archive: directory archives, the routes (the work is
// execd/files/archive_sender's and archive_upload's).
//   GET  /files/archive?path=DIR&format=tar|tar.gz|zip
//        a chunked stream of the archive (files/archive_sender).
//   POST /files/archive?path=DIR[&replace=true][&owner=&group=&mode=]
//        a tar or zip body extracted into DIR, all or nothing
//        (files/archive_upload). The body is limited by --archive-max-bytes:
//        413 before it is read when Content-Length says so.
#include "execd/api/api.h"
#include "execd/files/archive_sender.h"
#include "execd/files/archive_upload.h"
#include "fs/archive.h"
#include "protocol/errors.h"
#include "protocol/file_requests.h"
#include "protocol/query_values.h"
#include "protocol/resume.h"

namespace execd::api {

namespace codes = protocol::codes;
using http::Exchange;

namespace {

void handle_get(FileService& svc, Exchange& ex) {
  const std::string* path = protocol::query_value(ex.query, "path");
  if (!path || path->empty()) return ex.respond_error(400, codes::kMissingQuery, "missing query parameter 'path'");
  const std::string* fmt = protocol::query_value(ex.query, "format");
  auto format = fs::archive_format_from_name(fmt ? *fmt : "");
  if (!format) return ex.respond_error(400, codes::kInvalidRequestBody, "format must be tar, tar.gz or zip");
  files::send_archive(svc, ex, *path, *format);
}

bool query_flag(const Exchange& ex, const char* name) {
  const std::string* v = protocol::query_value(ex.query, name);
  return v && (*v == "true" || *v == "1");
}

void post_head(FileService& svc, Exchange& ex) {
  auto refuse = [&ex](int status, std::string_view code, std::string message) {
    ex.on_complete = [status, code = std::string(code), message](Exchange& e) { e.respond_error(status, code, message); };
  };
  files::ExtractParams p;
  const std::string* path = protocol::query_value(ex.query, "path");
  if (!path || path->empty()) return refuse(400, codes::kMissingQuery, "missing query parameter 'path'");
  p.path = *path;
  p.replace = query_flag(ex, "replace");
  if (const std::string* o = protocol::query_value(ex.query, "owner"); o && !o->empty()) p.owner.owner = *o;
  if (const std::string* g = protocol::query_value(ex.query, "group"); g && !g->empty()) p.owner.group = *g;
  if (const std::string* m = protocol::query_value(ex.query, "mode"); m && !m->empty()) {
    auto digits = protocol::parse_offset(*m);
    std::string error = "mode must be octal digits like 755";
    std::optional<uint32_t> mode;
    if (digits && *digits <= 7777) mode = protocol::mode_from_octal_digits(static_cast<int64_t>(*digits), error);
    if (!mode) return refuse(400, codes::kInvalidRequestBody, error);
    p.owner.mode = static_cast<mode_t>(*mode);
  }
  p.max_entries = static_cast<uint64_t>(svc.ctx.config.archive_max_entries);
  p.max_bytes = static_cast<uint64_t>(svc.ctx.config.archive_max_bytes);
  p.state_dir = svc.ctx.config.state_dir;
  // Too large by its own word: answered now, before a byte of it is read
  // (the connection closes after the answer).
  if (const std::string* len = ex.header("content-length")) {
    auto n = protocol::parse_offset(*len);
    if (n && *n > p.max_bytes)
      return ex.respond_error(413, codes::kPayloadTooLarge,
                              "the archive is larger than " + std::to_string(p.max_bytes) + " bytes (--archive-max-bytes)");
  }
  files::start_archive_upload(svc, ex, std::move(p));
}

}  // namespace

void add_archive_routes(RouteTable& routes, FileService& svc) {
  routes.add("GET", "/files/archive", [&svc](Exchange& ex) { handle_get(svc, ex); });
  routes.add_streaming(
      "POST", "/files/archive", [&svc](Exchange& ex) { post_head(svc, ex); }, [](Exchange&) {});
}

}  // namespace execd::api
