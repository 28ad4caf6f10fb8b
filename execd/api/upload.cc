// execd/api/upload: POST /files/upload and E2B's POST /files. The upload
// itself (multipart parsing, the writer on the pool, all or nothing) is
// execd/files/upload's; here the routes and envd's dialect: its xattr
// namespace and its answer.
#include "execd/api/api.h"
#include "execd/api/envd/files.h"
#include "execd/files/upload.h"

namespace execd::api {

using http::Exchange;

void envd_upload_head(FileService& svc, Exchange& ex, std::optional<std::string> path, std::string user,
                      std::map<std::string, std::string> metadata) {
  files::EnvdUpload e2b{std::move(path), std::move(user), std::move(metadata), std::string(kE2BMetadataPrefix), nullptr};
  e2b.reply = [metadata = e2b.metadata](const std::vector<std::string>& written) {
    return envd_upload_reply(written, metadata);
  };
  files::start_upload(svc, ex, std::move(e2b));
}

void add_upload_route(RouteTable& routes, const std::string& prefix, const FileServiceFor& service) {
  routes.add_streaming(
      "POST", prefix + "/files/upload",
      [service](Exchange& ex) {
        if (FileService* svc = service(ex)) files::start_upload(*svc, ex);
      },
      [](Exchange&) {});
}

}  // namespace execd::api
