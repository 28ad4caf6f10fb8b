// execd/api/files: the filesystem API (contract section 8) as routes:
// /files/info, DELETE /files, /files/permissions, /files/mv, /files/search,
// /files/replace, /directories/list, POST /directories, DELETE /directories
// here; /files/upload and /files/download stream (upload.cc, download.cc).
// Handlers are thin: validate the query or body, run the fs/ operation on the
// threadpool (run_file_job) and map its result to a response.
#include "execd/api/api.h"
#include "execd/api/file_jobs.h"
#include "execd/api/journal.h"
#include "fs/ops.h"
#include "protocol/errors.h"

namespace execd::api {

namespace codes = protocol::codes;
using http::Exchange;
using protocol::QueryParams;

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
const std::string* require_path(Exchange& ex, const QueryParams& q) {
  const std::string* path = protocol::query_value(q, "path");
  if (!path) ex.respond_error(400, codes::kMissingQuery, "missing query parameter 'path'");
  return path;
}

// Parses a buffered JSON body, or sends 400 INVALID_REQUEST_BODY.
std::optional<nlohmann::json> require_json(Exchange& ex, const protocol::HttpRequest& req) {
  std::string error;
  auto body = parse_json_body(req.body, error);
  if (!body) ex.respond_error(400, codes::kInvalidRequestBody, error);
  return body;
}

FileReply reply_status(const fs::Status& s) { return s ? FileReply::empty() : FileReply::from(s.error()); }

// The journal hears of a change once its job succeeded.
void run_change_job(Context& ctx, Exchange& ex, std::string op, std::vector<std::string> paths,
                    std::function<FileReply()> job) {
  run_file_job(ctx.loop, ex, std::move(job), [&ctx, op = std::move(op), paths = std::move(paths)](const FileReply& r) {
    if (r.status < 300) journal_file_change(ctx, op, paths);
  });
}

void handle_info(uv_loop_t* loop, Exchange& ex, const QueryParams& q) {
  run_file_job(loop, ex, [paths = all_values(q, "path")] {
    auto infos = fs::get_file_info(paths, fs::process_env_lookup());
    if (!infos) return FileReply::from(infos.error());
    return FileReply::json(fs::file_info_map_json(infos.value()));
  });
}

void handle_delete_files(Context& ctx, Exchange& ex, const QueryParams& q) {
  run_change_job(ctx, ex, "rm", all_values(q, "path"), [paths = all_values(q, "path")] {
    return reply_status(fs::delete_files(paths, fs::process_env_lookup()));
  });
}

void handle_permissions(Context& ctx, Exchange& ex, const protocol::HttpRequest& req) {
  auto body = require_json(ex, req);
  if (!body) return;
  auto requests = fs::parse_permission_requests(*body);
  if (!requests) return send_reply(ex, FileReply::from(requests.error()));
  std::vector<std::string> paths;
  for (const auto& r : requests.value()) paths.push_back(r.path);
  run_change_job(ctx, ex, "chmod", std::move(paths), [r = std::move(requests.value())] {
    return reply_status(fs::set_permissions(r, fs::process_env_lookup()));
  });
}

void handle_make_directories(uv_loop_t* loop, Exchange& ex, const protocol::HttpRequest& req) {
  auto body = require_json(ex, req);
  if (!body) return;
  auto requests = fs::parse_permission_requests(*body);
  if (!requests) return send_reply(ex, FileReply::from(requests.error()));
  run_file_job(loop, ex, [r = std::move(requests.value())] {
    return reply_status(fs::make_directories(r, fs::process_env_lookup()));
  });
}

void handle_move(Context& ctx, Exchange& ex, const protocol::HttpRequest& req) {
  auto body = require_json(ex, req);
  if (!body) return;
  auto requests = fs::parse_move_requests(*body);
  if (!requests) return send_reply(ex, FileReply::from(requests.error()));
  std::vector<std::string> paths;
  for (const auto& r : requests.value()) {
    paths.push_back(r.src);
    paths.push_back(r.dest);
  }
  run_change_job(ctx, ex, "mv", std::move(paths), [r = std::move(requests.value())] {
    return reply_status(fs::move_files(r, fs::process_env_lookup()));
  });
}

void handle_replace(Context& ctx, Exchange& ex, const protocol::HttpRequest& req, const QueryParams& q) {
  auto body = require_json(ex, req);
  if (!body) return;
  auto requests = fs::parse_replace_requests(*body);
  if (!requests) return send_reply(ex, FileReply::from(requests.error()));
  const std::string* verbose = protocol::query_value(q, "verbose");
  bool detailed = verbose && *verbose == "true";
  std::vector<std::string> paths;
  for (const auto& r : requests.value()) paths.push_back(r.path);
  run_change_job(ctx, ex, "replace", std::move(paths), [r = std::move(requests.value()), detailed] {
    auto outcomes = fs::replace_in_files(r, fs::process_env_lookup());
    if (!outcomes) return FileReply::from(outcomes.error());
    return detailed ? FileReply::json(fs::replace_outcomes_json(outcomes.value())) : FileReply::empty();
  });
}

void handle_search(uv_loop_t* loop, Exchange& ex, const QueryParams& q) {
  const std::string* path = require_path(ex, q);
  if (!path) return;
  const std::string* pattern = protocol::query_value(q, "pattern");
  run_file_job(loop, ex, [root = *path, pat = pattern ? *pattern : std::string()] {
    auto found = fs::search_files(root, pat, kMaxSearchResults, fs::process_env_lookup());
    if (!found) return FileReply::from(found.error());
    FileReply reply = FileReply::json(nlohmann::json(found.value().files));
    if (found.value().truncated) reply.headers.emplace_back("EXECD-SEARCH-TRUNCATED: true");
    return reply;
  });
}

void handle_list(uv_loop_t* loop, Exchange& ex, const QueryParams& q) {
  const std::string* path = require_path(ex, q);
  if (!path) return;
  const std::string* raw_depth = protocol::query_value(q, "depth");
  auto depth = fs::parse_list_depth(raw_depth ? std::optional<std::string_view>(*raw_depth) : std::nullopt);
  if (!depth) return send_reply(ex, FileReply::from(depth.error()));
  run_file_job(loop, ex, [p = *path, d = depth.value()] {
    auto entries = fs::list_directory(p, d, fs::process_env_lookup());
    if (!entries) return FileReply::from(entries.error());
    return FileReply::json(nlohmann::json(entries.value()));
  });
}

void handle_remove_directories(uv_loop_t* loop, Exchange& ex, const QueryParams& q) {
  run_file_job(loop, ex, [paths = all_values(q, "path")] {
    return reply_status(fs::remove_directories(paths, fs::process_env_lookup()));
  });
}

}  // namespace

void add_file_routes(RouteTable& routes, Context& ctx) {
  uv_loop_t* loop = ctx.loop;
  routes.add("GET", "/files/info", [loop](Exchange& ex) { handle_info(loop, ex, ex.query); });
  routes.add("DELETE", "/files", [&ctx](Exchange& ex) { handle_delete_files(ctx, ex, ex.query); });
  routes.add("POST", "/files/permissions", [&ctx](Exchange& ex) { handle_permissions(ctx, ex, ex.request()); });
  routes.add("POST", "/files/mv", [&ctx](Exchange& ex) { handle_move(ctx, ex, ex.request()); });
  routes.add("GET", "/files/search", [loop](Exchange& ex) { handle_search(loop, ex, ex.query); });
  routes.add("POST", "/files/replace", [&ctx](Exchange& ex) { handle_replace(ctx, ex, ex.request(), ex.query); });
  routes.add("GET", "/directories/list", [loop](Exchange& ex) { handle_list(loop, ex, ex.query); });
  routes.add("POST", "/directories", [loop](Exchange& ex) { handle_make_directories(loop, ex, ex.request()); });
  routes.add("DELETE", "/directories", [loop](Exchange& ex) { handle_remove_directories(loop, ex, ex.query); });
}

}  // namespace execd::api
