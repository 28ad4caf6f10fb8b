// execd/files/file_identities: the FileService of each user that the
// /v1/filesystem/{uid}/{gid} routes act as (the OpenSandbox 1.1 SDK's
// files_with_identity). One per (uid, gid), made on first use and kept
// (streams hold a reference to theirs), at most kMaxIdentities of them.
#pragma once

#include <map>
#include <memory>
#include <utility>

#include "execd/files/file_jobs.h"
#include "fs/identity.h"

namespace execd::files {

class FileIdentities {
 public:
  static constexpr size_t kMaxIdentities = 256;
  explicit FileIdentities(FileService& plain);
  // The service for the route's {uid}/{gid}, or nullptr with the refusal
  // sent: 400 for ids that are not 0..4294967294, 403 when execd cannot
  // take on another user (no CAP_SETUID/CAP_SETGID), 429 past the cap.
  FileService* service_for(http::Exchange& ex);

 private:
  struct Entry {
    fs::Identity identity;
    std::unique_ptr<FileService> service;
  };
  FileService& plain_;
  const bool can_switch_;
  std::map<std::pair<uid_t, gid_t>, Entry> entries_;
};

}  // namespace execd::files
