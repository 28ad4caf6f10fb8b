// execd/files/file_identities: see header.
#include "execd/files/file_identities.h"

#include <optional>
#include <string>

#include "protocol/errors.h"

namespace execd::files {
namespace {

// As the SDK checks them: a decimal integer 0..4294967294 (-1 is "no id").
std::optional<uint32_t> parse_id(const std::string& s) {
  if (s.empty() || s.size() > 10) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > 4294967294ull) return std::nullopt;
  return static_cast<uint32_t>(v);
}

}  // namespace

FileIdentities::FileIdentities(FileService& plain) : plain_(plain), can_switch_(fs::can_assume_identities()) {}

FileService* FileIdentities::service_for(http::Exchange& ex) {
  auto uid = parse_id(ex.params.get("uid")), gid = parse_id(ex.params.get("gid"));
  if (!uid || !gid) {
    ex.respond_error(400, protocol::codes::kInvalidRequestBody, "uid and gid must be integers between 0 and 4294967294");
    return nullptr;
  }
  auto key = std::make_pair(static_cast<uid_t>(*uid), static_cast<gid_t>(*gid));
  if (auto it = entries_.find(key); it != entries_.end()) return it->second.service.get();
  fs::Identity id{key.first, key.second};
  if (!can_switch_ && !fs::is_own_identity(id)) {
    ex.respond_error(403, "IDENTITY_UNAVAILABLE",
                     "execd cannot act as uid " + std::to_string(*uid) + " gid " + std::to_string(*gid) +
                         ": it lacks CAP_SETUID and CAP_SETGID");
    return nullptr;
  }
  if (entries_.size() >= kMaxIdentities) {
    ex.respond_error(429, "LIMIT_REACHED",
                     "file identities: at most " + std::to_string(kMaxIdentities) + " distinct uid/gid pairs");
    return nullptr;
  }
  Entry& e = entries_[key];
  e.identity = id;
  e.service = std::make_unique<FileService>(FileService{plain_.ctx, plain_.gate, plain_.journal, nullptr, nullptr, {}, plain_.state_budget});
  // execd's own identity needs no switch.
  if (!fs::is_own_identity(id)) e.service->identity = &e.identity;
  return e.service.get();
}

}  // namespace execd::files
