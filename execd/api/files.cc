// execd/api/files: the filesystem API (the Go daemon's /files and /directories) as routes:
// /files/info, DELETE /files, /files/permissions, /files/mv, /files/search,
// /files/replace, /directories/list, POST /directories, DELETE /directories
// here; /files/upload and /files/download stream (upload.cc, download.cc).
// Handlers are thin: validate the query or body, run the fs/ operation on the
// threadpool (run_file_job) and map its result to a response; a search
// streams through execd/files/search_stream.
#include "execd/api/api.h"
#include "execd/files/file_jobs.h"
#include "execd/files/search_stream.h"
#include "fs/ops.h"
#include "protocol/errors.h"
#include "protocol/file_requests.h"

namespace execd::api {

namespace codes = protocol::codes;
using http::Exchange;
using protocol::QueryParams;

namespace {

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

// Decodes a buffered JSON body with `decode`, or sends 400
// INVALID_REQUEST_BODY with the reason.
template <class Decode>
auto require_body(Exchange& ex, const protocol::HttpRequest& req, Decode decode)
    -> std::optional<std::decay_t<decltype(std::get<0>(decode(std::string_view())))>> {
  auto decoded = decode(std::string_view(req.body));
  if (auto* err = std::get_if<protocol::DecodeError>(&decoded)) {
    ex.respond_error(400, codes::kInvalidRequestBody, err->message);
    return std::nullopt;
  }
  return std::move(std::get<0>(decoded));
}

std::vector<fs::PermissionRequest> permission_requests(const protocol::PermissionList& list) {
  std::vector<fs::PermissionRequest> out;
  for (const auto& [path, p] : list) out.push_back({path, to_permission_spec(p)});
  return out;
}

FileReply reply_status(const fs::Status& s) { return s ? FileReply::empty() : FileReply::from(s.error()); }

// The journal hears of a change once its job succeeded.
void run_change_job(FileService& svc, Exchange& ex, std::string op, std::vector<std::string> paths,
                    std::function<FileReply()> job) {
  // The service may be an isolated session's, gone by the time the job is: a copy.
  run_file_job(svc, ex, std::move(job), [svc, op = std::move(op), paths = std::move(paths)](const FileReply& r) {
    if (r.status < 300) journal_change(svc, op, paths);
  });
}

void handle_info(FileService& svc, Exchange& ex, const QueryParams& q) {
  run_file_job(svc, ex, [paths = all_values(q, "path")] {
    auto infos = fs::get_file_info(paths, fs::process_env_lookup());
    if (!infos) return FileReply::from(infos.error());
    return FileReply::json(fs::file_info_map_json(infos.value()));
  });
}

void handle_delete_files(FileService& svc, Exchange& ex, const QueryParams& q) {
  run_change_job(svc, ex, "rm", all_values(q, "path"), [paths = all_values(q, "path")] {
    return reply_status(fs::delete_files(paths, fs::process_env_lookup()));
  });
}

void handle_permissions(FileService& svc, Exchange& ex, const protocol::HttpRequest& req) {
  auto list = require_body(ex, req, protocol::decode_permission_map);
  if (!list) return;
  std::vector<std::string> paths;
  for (const auto& [path, p] : *list) paths.push_back(path);
  run_change_job(svc, ex, "chmod", std::move(paths), [r = permission_requests(*list)] {
    return reply_status(fs::set_permissions(r, fs::process_env_lookup()));
  });
}

void handle_make_directories(FileService& svc, Exchange& ex, const protocol::HttpRequest& req) {
  auto list = require_body(ex, req, protocol::decode_permission_map);
  if (!list) return;
  run_file_job(svc, ex, [r = permission_requests(*list)] {
    return reply_status(fs::make_directories(r, fs::process_env_lookup()));
  });
}

void handle_move(FileService& svc, Exchange& ex, const protocol::HttpRequest& req) {
  auto items = require_body(ex, req, protocol::decode_move_list);
  if (!items) return;
  std::vector<std::string> paths;
  std::vector<fs::MoveRequest> moves;
  for (const auto& m : *items) {
    paths.push_back(m.src);
    paths.push_back(m.dest);
    moves.push_back({m.src, m.dest});
  }
  run_change_job(svc, ex, "mv", std::move(paths), [r = std::move(moves)] {
    return reply_status(fs::move_files(r, fs::process_env_lookup()));
  });
}

void handle_replace(FileService& svc, Exchange& ex, const protocol::HttpRequest& req, const QueryParams& q) {
  auto items = require_body(ex, req, protocol::decode_replace_map);
  if (!items) return;
  const std::string* verbose = protocol::query_value(q, "verbose");
  bool detailed = verbose && *verbose == "true";
  std::vector<std::string> paths;
  std::vector<fs::ReplaceRequest> replaces;
  for (const auto& r : *items) {
    paths.push_back(r.path);
    replaces.push_back({r.path, r.old_text, r.new_text});
  }
  run_change_job(svc, ex, "replace", std::move(paths), [r = std::move(replaces), detailed] {
    auto outcomes = fs::replace_in_files(r, fs::process_env_lookup());
    if (!outcomes) return FileReply::from(outcomes.error());
    return detailed ? FileReply::json(fs::replace_outcomes_json(outcomes.value())) : FileReply::empty();
  });
}

void handle_search(FileService& svc, Exchange& ex, const QueryParams& q) {
  const std::string* path = require_path(ex, q);
  if (!path) return;
  const std::string* pattern = protocol::query_value(q, "pattern");
  files::send_search(svc, ex, *path, pattern ? *pattern : std::string());
}

void handle_list(FileService& svc, Exchange& ex, const QueryParams& q) {
  const std::string* path = require_path(ex, q);
  if (!path) return;
  const std::string* raw_depth = protocol::query_value(q, "depth");
  auto depth = fs::parse_list_depth(raw_depth ? std::optional<std::string_view>(*raw_depth) : std::nullopt);
  if (!depth) return send_reply(ex, FileReply::from(depth.error()));
  run_file_job(svc, ex, [p = *path, d = depth.value()] {
    auto entries = fs::list_directory(p, d, fs::process_env_lookup());
    if (!entries) return FileReply::from(entries.error());
    return FileReply::json(nlohmann::json(entries.value()));
  });
}

void handle_remove_directories(FileService& svc, Exchange& ex, const QueryParams& q) {
  run_file_job(svc, ex, [paths = all_values(q, "path")] {
    return reply_status(fs::remove_directories(paths, fs::process_env_lookup()));
  });
}

}  // namespace

void add_file_routes(RouteTable& routes, const std::string& prefix, const FileServiceFor& service) {
  routes.add("GET", prefix + "/files/info", [service](Exchange& ex) {
    if (FileService* svc = service(ex)) handle_info(*svc, ex, ex.query);
  });
  routes.add("DELETE", prefix + "/files", [service](Exchange& ex) {
    if (FileService* svc = service(ex)) handle_delete_files(*svc, ex, ex.query);
  });
  routes.add("POST", prefix + "/files/permissions", [service](Exchange& ex) {
    if (FileService* svc = service(ex)) handle_permissions(*svc, ex, ex.request());
  });
  routes.add("POST", prefix + "/files/mv", [service](Exchange& ex) {
    if (FileService* svc = service(ex)) handle_move(*svc, ex, ex.request());
  });
  routes.add("GET", prefix + "/files/search", [service](Exchange& ex) {
    if (FileService* svc = service(ex)) handle_search(*svc, ex, ex.query);
  });
  routes.add("POST", prefix + "/files/replace", [service](Exchange& ex) {
    if (FileService* svc = service(ex)) handle_replace(*svc, ex, ex.request(), ex.query);
  });
  routes.add("GET", prefix + "/directories/list", [service](Exchange& ex) {
    if (FileService* svc = service(ex)) handle_list(*svc, ex, ex.query);
  });
  routes.add("POST", prefix + "/directories", [service](Exchange& ex) {
    if (FileService* svc = service(ex)) handle_make_directories(*svc, ex, ex.request());
  });
  routes.add("DELETE", prefix + "/directories", [service](Exchange& ex) {
    if (FileService* svc = service(ex)) handle_remove_directories(*svc, ex, ex.query);
  });
}

}  // namespace execd::api
