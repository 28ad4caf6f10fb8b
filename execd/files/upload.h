// execd/files/upload: an upload, from the request's head to its answer: the
// multipart (or, for E2B, raw or gzip) body parsed as it arrives and written
// all or nothing through execd/files/upload_writer (the details are in
// upload.cc). The route handlers are execd/api/upload's.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "execd/files/file_service.h"
#include "execd/http/exchange.h"

namespace execd::files {

// E2B's POST /files: what the query named, and how envd's dialect marks and
// answers what was written.
struct EnvdUpload {
  std::optional<std::string> path;
  std::string user;
  std::map<std::string, std::string> metadata;  // X-Metadata-*: every file gets it
  std::string metadata_xattr_prefix;            // the xattr namespace `metadata` goes to
  // The 200 body, from the paths written as envd reports them.
  std::function<std::string(const std::vector<std::string>& written)> reply;
};

// Makes an Upload the exchange's Source and starts it on the request's head;
// it answers once the body has been read and every file is in place (or,
// on any failure, none is).
void start_upload(const FileService& svc, http::Exchange& ex, std::optional<EnvdUpload> e2b = std::nullopt);

}  // namespace execd::files
