// execd/files: the non-streaming filesystem routes and the registration of
// all of them (see header). Every fs/ call runs on the threadpool through
// run_file_job.
#include "execd/files.h"

#include <cstdlib>

#include "execd/download.h"
#include "execd/file_work.h"
#include "execd/upload.h"
#include "fs/ops.h"
#include "protocol/errors.h"

namespace execd {

namespace codes = protocol::codes;
using protocol::HttpRequest;
using protocol::QueryParams;
using protocol::RouteParams;

namespace {

// Most searches return a handful of entries; this bounds the response of a
// pattern that matches a whole disk. A capped result carries the header
// `EXECD-SEARCH-TRUNCATED: true`.
constexpr size_t kMaxSearchResults = 100000;

std::vector<std::string> all_values(const QueryParams& q, std::string_view name) {
  std::vector<std::string> out;
  for (const auto& [k, v] : q)
    if (k == name) out.push_back(v);
  return out;
}

// The required `path` query parameter, or a 400 MISSING_QUERY already sent.
const std::string* require_path(Connection& conn, const QueryParams& q) {
  const std::string* path = protocol::query_value(q, "path");
  if (!path) conn.respond_error(400, codes::kMissingQuery, "missing query parameter 'path'");
  return path;
}

// Parses a buffered JSON body, or sends 400 INVALID_REQUEST_BODY.
std::optional<nlohmann::json> require_json(Connection& conn, const HttpRequest& req) {
  std::string error;
  auto body = parse_json_body(req.body, error);
  if (!body) conn.respond_error(400, codes::kInvalidRequestBody, error);
  return body;
}

FileReply reply_status(const fs::Status& s) { return s ? FileReply::empty() : FileReply::from(s.error()); }

void handle_info(uv_loop_t* loop, Connection& conn, const QueryParams& q) {
  run_file_job(loop, conn, [paths = all_values(q, "path")] {
    auto infos = fs::get_file_info(paths, fs::process_env_lookup());
    if (!infos) return FileReply::from(infos.error());
    return FileReply::json(fs::file_info_map_json(infos.value()));
  });
}

void handle_delete_files(uv_loop_t* loop, Connection& conn, const QueryParams& q) {
  run_file_job(loop, conn, [paths = all_values(q, "path")] {
    return reply_status(fs::delete_files(paths, fs::process_env_lookup()));
  });
}

void handle_permissions(uv_loop_t* loop, Connection& conn, const HttpRequest& req) {
  auto body = require_json(conn, req);
  if (!body) return;
  auto requests = fs::parse_permission_requests(*body);
  if (!requests) return send_reply(conn, FileReply::from(requests.error()));
  run_file_job(loop, conn, [r = std::move(requests.value())] {
    return reply_status(fs::set_permissions(r, fs::process_env_lookup()));
  });
}

void handle_make_directories(uv_loop_t* loop, Connection& conn, const HttpRequest& req) {
  auto body = require_json(conn, req);
  if (!body) return;
  auto requests = fs::parse_permission_requests(*body);
  if (!requests) return send_reply(conn, FileReply::from(requests.error()));
  run_file_job(loop, conn, [r = std::move(requests.value())] {
    return reply_status(fs::make_directories(r, fs::process_env_lookup()));
  });
}

void handle_move(uv_loop_t* loop, Connection& conn, const HttpRequest& req) {
  auto body = require_json(conn, req);
  if (!body) return;
  auto requests = fs::parse_move_requests(*body);
  if (!requests) return send_reply(conn, FileReply::from(requests.error()));
  run_file_job(loop, conn, [r = std::move(requests.value())] {
    return reply_status(fs::move_files(r, fs::process_env_lookup()));
  });
}

void handle_replace(uv_loop_t* loop, Connection& conn, const HttpRequest& req, const QueryParams& q) {
  auto body = require_json(conn, req);
  if (!body) return;
  auto requests = fs::parse_replace_requests(*body);
  if (!requests) return send_reply(conn, FileReply::from(requests.error()));
  const std::string* verbose = protocol::query_value(q, "verbose");
  bool detailed = verbose && *verbose == "true";
  run_file_job(loop, conn, [r = std::move(requests.value()), detailed] {
    auto outcomes = fs::replace_in_files(r, fs::process_env_lookup());
    if (!outcomes) return FileReply::from(outcomes.error());
    return detailed ? FileReply::json(fs::replace_outcomes_json(outcomes.value())) : FileReply::empty();
  });
}

void handle_search(uv_loop_t* loop, Connection& conn, const QueryParams& q) {
  const std::string* path = require_path(conn, q);
  if (!path) return;
  const std::string* pattern = protocol::query_value(q, "pattern");
  run_file_job(loop, conn, [root = *path, pat = pattern ? *pattern : std::string()] {
    auto found = fs::search_files(root, pat, kMaxSearchResults, fs::process_env_lookup());
    if (!found) return FileReply::from(found.error());
    FileReply reply = FileReply::json(nlohmann::json(found.value().files));
    if (found.value().truncated) reply.headers.emplace_back("EXECD-SEARCH-TRUNCATED: true");
    return reply;
  });
}

void handle_list(uv_loop_t* loop, Connection& conn, const QueryParams& q) {
  const std::string* path = require_path(conn, q);
  if (!path) return;
  const std::string* raw_depth = protocol::query_value(q, "depth");
  auto depth = fs::parse_list_depth(raw_depth ? std::optional<std::string_view>(*raw_depth) : std::nullopt);
  if (!depth) return send_reply(conn, FileReply::from(depth.error()));
  run_file_job(loop, conn, [p = *path, d = depth.value()] {
    auto entries = fs::list_directory(p, d, fs::process_env_lookup());
    if (!entries) return FileReply::from(entries.error());
    return FileReply::json(nlohmann::json(entries.value()));
  });
}

void handle_remove_directories(uv_loop_t* loop, Connection& conn, const QueryParams& q) {
  run_file_job(loop, conn, [paths = all_values(q, "path")] {
    return reply_status(fs::remove_directories(paths, fs::process_env_lookup()));
  });
}

}  // namespace

void register_file_routes(Routes& routes, Context& ctx) {
  // Uploads, downloads and tree walks each hold a pool thread while they
  // touch the disk; libuv's default of 4 would let two slow transfers delay
  // every command start. Must happen before the first uv_queue_work.
  setenv("UV_THREADPOOL_SIZE", "16", 0);

  uv_loop_t* loop = ctx.loop;
  routes.add("GET", "/files/info", [loop](Connection& c, HttpRequest&, const RouteParams&, const QueryParams& q) {
    handle_info(loop, c, q);
  });
  routes.add("DELETE", "/files", [loop](Connection& c, HttpRequest&, const RouteParams&, const QueryParams& q) {
    handle_delete_files(loop, c, q);
  });
  routes.add("POST", "/files/permissions",
             [loop](Connection& c, HttpRequest& r, const RouteParams&, const QueryParams&) {
               handle_permissions(loop, c, r);
             });
  routes.add("POST", "/files/mv", [loop](Connection& c, HttpRequest& r, const RouteParams&, const QueryParams&) {
    handle_move(loop, c, r);
  });
  routes.add("GET", "/files/search", [loop](Connection& c, HttpRequest&, const RouteParams&, const QueryParams& q) {
    handle_search(loop, c, q);
  });
  routes.add("POST", "/files/replace",
             [loop](Connection& c, HttpRequest& r, const RouteParams&, const QueryParams& q) {
               handle_replace(loop, c, r, q);
             });
  routes.add("GET", "/directories/list",
             [loop](Connection& c, HttpRequest&, const RouteParams&, const QueryParams& q) { handle_list(loop, c, q); });
  routes.add("POST", "/directories", [loop](Connection& c, HttpRequest& r, const RouteParams&, const QueryParams&) {
    handle_make_directories(loop, c, r);
  });
  routes.add("DELETE", "/directories",
             [loop](Connection& c, HttpRequest&, const RouteParams&, const QueryParams& q) {
               handle_remove_directories(loop, c, q);
             });
  register_download_route(routes, ctx);
  register_upload_route(routes, ctx);
}

}  // namespace execd
