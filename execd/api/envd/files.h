// execd/api/envd/files: the plain HTTP routes of E2B's envd (spec/envd.yaml)
// that the SDKs use beside the Connect services: GET /health (204),
// GET /files and POST /files (the download and upload pipelines of
// api/download and api/upload, with envd's paths, users and answer), GET
// /envs, GET /metrics.
//
// /files takes the X-Access-Token, or instead a signature in the query, as
// envd: `signature` = "v1_" + unpadded base64 of SHA-256 over
// "path:operation:username:token[:expiration]" (operation "read" or
// "write"), `signature_expiration` a Unix time in seconds; the SDKs'
// upload_url()/download_url() build these, with the envd token, or with
// execd's own (unless a runtime binding replaced it by its hash). Only an
// open listener (execd/access: the insecure mode) lets every request in.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "execd/api/api.h"  // FileService, run_file_job (execd/files) as api:: names
#include "execd/envd/entries.h"
#include "execd/metrics/service.h"
#include "execd/routes.h"

namespace execd::api {

// `access` decides as for every other route of the E2B listener; a signed
// URL (envd's `signature`) stands in for the header on GET and POST /files.
void add_envd_file_routes(RouteTable& routes, const Access& access, FileService& files, metrics::MetricsService& metrics);

// Shared with api/download and api/upload.
void envd_download(FileService& svc, http::Exchange& ex, std::string path, std::string user);
// `metadata`: X-Metadata-* (keys lower-cased), set on every file written as
// its user.e2b.* extended attributes.
void envd_upload_head(FileService& svc, http::Exchange& ex, std::optional<std::string> path, std::string user,
                      std::map<std::string, std::string> metadata);
// [{"name":"x.txt","type":"file","path":"/home/user/x.txt"[,"metadata":{...}]}, ...]
std::string envd_upload_reply(const std::vector<std::string>& paths,
                              const std::map<std::string, std::string>& metadata);
// The xattr namespace of E2B's file metadata (execd/envd/entries).
using ::execd::envd::kE2BMetadataPrefix;

// "v1_..." for `path`, `operation`, `user` under `token`, expiring at
// `expiration` (Unix seconds) if given. Exposed for tests.
std::string envd_file_signature(const std::string& path, const std::string& operation, const std::string& user,
                                const std::string& token, std::optional<int64_t> expiration);

}  // namespace execd::api
