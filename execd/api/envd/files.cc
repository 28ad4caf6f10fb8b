// execd/api/envd/files: see header.
#include "execd/api/envd/files.h"

#include <ctime>

#include "execd/api/envd/connect_rpc.h"
#include "execd/context.h"
#include "fs/paths.h"
#include "protocol/base64.h"
#include "protocol/envd.h"
#include "protocol/errors.h"
#include "protocol/gunzip.h"
#include "protocol/json_text.h"
#include "protocol/query_values.h"
#include "protocol/sha.h"
#include "protocol/token.h"

namespace execd::api {

namespace codes = protocol::codes;

// Named, not anonymous: the unity build puts this file in one translation
// unit with the other api/ files.
namespace envd_files_impl {

// Why a /files request may not go on, or nothing: a token the listener
// takes (execd/access), or the signature for this path, user and operation
// (envd's validateSigning) made with one of the raw tokens.
std::optional<std::string> refuse_file_access(const Access& access, const http::Exchange& ex, const std::string& path,
                                              const std::string& user, const char* operation) {
  if (ex.authorized) return std::nullopt;  // the listener is open, or a header carried a token it takes
  for (const auto& name : access.token_headers(Listener::e2b))
    if (ex.header(name)) return "access token present in header but does not match";
  const std::string* signature = protocol::query_value(ex.query, "signature");
  if (!signature) return "missing signature query parameter (or X-Access-Token header)";
  std::optional<int64_t> expiration;
  if (const std::string* raw = protocol::query_value(ex.query, "signature_expiration")) {
    char* end = nullptr;
    long long v = strtoll(raw->c_str(), &end, 10);
    if (raw->empty() || *end) return "invalid signature_expiration";
    expiration = v;
  }
  bool valid = false;
  for (std::string_view token : access.signing_tokens())
    valid |= protocol::token_equal(envd_file_signature(path, operation, user, std::string(token), expiration), *signature);
  if (!valid) return "invalid signature";
  if (expiration && *expiration < static_cast<int64_t>(time(nullptr))) return "signature is already expired";
  return std::nullopt;
}

constexpr std::string_view kMetadataHeader = "x-metadata-";
// ext4 keeps every xattr of a file in one 4 KiB block; past that the
// write fails and says so. The count bound keeps a header flood cheap.
constexpr size_t kMaxMetadataKeys = 64;

bool printable_ascii(std::string_view v) {
  for (char c : v)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

std::string query_or_empty(const http::Exchange& ex, std::string_view name) {
  const std::string* v = protocol::query_value(ex.query, name);
  return v ? *v : std::string();
}

std::string envd_metrics_body(const metrics::MetricsSample& s) {
  auto mib = [](double v) { return static_cast<uint64_t>(v); };
  std::string out = "{\"ts\":" + std::to_string(s.timestamp_ms / 1000);
  out += ",\"cpu_count\":" + std::to_string(static_cast<int64_t>(s.cpu_count + 0.5));
  char pct[32];
  snprintf(pct, sizeof pct, "%.2f", s.cpu_used_pct);
  out += ",\"cpu_used_pct\":";
  out += pct;
  out += ",\"mem_total\":" + std::to_string(mib(s.mem_total_mib * 1048576.0));
  out += ",\"mem_used\":" + std::to_string(mib(s.mem_used_mib * 1048576.0));
  out += ",\"mem_total_mib\":" + std::to_string(mib(s.mem_total_mib));
  out += ",\"mem_used_mib\":" + std::to_string(mib(s.mem_used_mib));
  out += ",\"disk_used\":" + std::to_string(s.disk_used_bytes);
  out += ",\"disk_total\":" + std::to_string(s.disk_total_bytes);
  out += '}';
  return out;
}

}  // namespace envd_files_impl

std::string envd_file_signature(const std::string& path, const std::string& operation, const std::string& user,
                                const std::string& token, std::optional<int64_t> expiration) {
  std::string raw = path + ":" + operation + ":" + user + ":" + token;
  if (expiration) raw += ":" + std::to_string(*expiration);
  protocol::Sha256Digest d = protocol::sha256(raw);
  std::string b64 = protocol::base64_encode(d.data(), d.size());
  while (!b64.empty() && b64.back() == '=') b64.pop_back();
  return "v1_" + b64;
}

std::string envd_upload_reply(const std::vector<std::string>& paths,
                              const std::map<std::string, std::string>& metadata) {
  std::string out = "[";
  for (size_t i = 0; i < paths.size(); ++i) {
    if (i) out += ',';
    out += "{\"name\":";
    protocol::append_json_string_lossy(out, fs::base_name(fs::clean_path(paths[i])));
    out += ",\"type\":\"file\",\"path\":";
    protocol::append_json_string_lossy(out, paths[i]);
    if (!metadata.empty()) {
      out += ",\"metadata\":";
      protocol::envd::append_metadata(out, metadata);
    }
    out += '}';
  }
  out += ']';
  return out;
}

void add_envd_file_routes(RouteTable& routes, const Access& access, FileService& files, metrics::MetricsService& metrics) {
  namespace impl = envd_files_impl;
  routes.add("GET", "/health", [](http::Exchange& ex) {
    ex.respond(204, "", "", {std::string("X-Envd-Version: ") + protocol::envd::kEnvdVersion});
  }, kProbe);
  // The token or a signature is checked here, as envd does.
  routes.add("GET", "/files", [&files, &access](http::Exchange& ex) {
    std::string path = impl::query_or_empty(ex, "path"), user = impl::query_or_empty(ex, "username");
    if (auto why = impl::refuse_file_access(access, ex, path, user, "read"))
      return ex.respond_error(401, codes::kUnauthorized, *why);
    envd_download(files, ex, path, user);
  }, kSelfChecked);
  routes.add_streaming(
      "POST", "/files",
      [&files, &access](http::Exchange& ex) {
        const std::string* path = protocol::query_value(ex.query, "path");
        std::string user = impl::query_or_empty(ex, "username");
        if (auto why = impl::refuse_file_access(access, ex, path ? *path : std::string(), user, "write")) {
          // Before any byte of the body is taken; the connection closes.
          return ex.respond_error(401, codes::kUnauthorized, *why);
        }
        // gzip is inflated as it arrives (api/upload); writing any other
        // coding's bytes as the file would be silent corruption.
        if (const std::string* enc = ex.header("content-encoding");
            protocol::content_coding(enc) == protocol::ContentCoding::unsupported) {
          ex.on_complete = [e = *enc](http::Exchange& x) {
            x.respond_error(415, codes::kInvalidFile,
                            "Content-Encoding " + e + " is not supported; send the file as it is");
          };
          return;
        }
        // X-Metadata-<key>: the file's user.e2b.<key> xattr, as envd keeps
        // it (header names arrive lower-cased, the keys envd stores).
        std::map<std::string, std::string> metadata;
        for (const auto& [name, value] : ex.request().headers) {
          if (name.rfind(impl::kMetadataHeader, 0) != 0) continue;
          std::string key = name.substr(impl::kMetadataHeader.size());
          std::optional<std::string> bad;
          if (key.empty()) bad = "an X-Metadata- header without a key";
          else if (!impl::printable_ascii(value)) bad = "metadata " + key + ": values must be printable US-ASCII";
          else if (metadata.size() >= impl::kMaxMetadataKeys)
            bad = "more than " + std::to_string(impl::kMaxMetadataKeys) + " metadata keys";
          if (bad) {
            ex.on_complete = [why = *bad](http::Exchange& x) {
              x.respond_error(400, codes::kInvalidFileMetadata, why);
            };
            return;
          }
          metadata[key] = value;
        }
        envd_upload_head(files, ex, path ? std::optional<std::string>(*path) : std::nullopt, user,
                         std::move(metadata));
      },
      [](http::Exchange&) {}, kSelfChecked);
  routes.add("GET", "/envs", [&files](http::Exchange& ex) {
    std::string out = "{";
    bool first = true;
    for (const std::string& kv : files.ctx.base_env) {
      size_t eq = kv.find('=');
      if (eq == std::string::npos) continue;
      if (!first) out += ',';
      first = false;
      protocol::append_json_string_lossy(out, std::string_view(kv).substr(0, eq));
      out += ':';
      protocol::append_json_string_lossy(out, std::string_view(kv).substr(eq + 1));
    }
    out += '}';
    ex.respond_json(200, out);
  });
  routes.add("GET", "/metrics", [&metrics](http::Exchange& ex) { metrics.answer(ex, impl::envd_metrics_body); });
}

}  // namespace execd::api
