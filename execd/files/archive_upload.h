// execd/files/archive_upload: an archive extracted into a directory (POST
// /files/archive). The tar (plain, gzip, bzip2, xz, zstd) or zip body is
// spooled to an unnamed file in the state directory as it arrives (paused
// while the disk is behind; counted against the state budget), then
// extracted into a new directory next to the target and renamed into place
// only if every entry was valid (fs/archive lists what is refused). owner/
// group go to every extracted entry, mode to the target itself, as an
// upload's metadata. The extraction is limited by --archive-max-entries and
// --archive-max-bytes. Answers {"path","entries","files","directories",
// "symlinks","hardlinks","bytes","format","replaced","archive_sha256"} and
// journals it.
#pragma once

#include <cstdint>
#include <string>

#include "execd/files/file_service.h"
#include "execd/http/exchange.h"
#include "fs/permissions.h"

namespace execd::files {

struct ExtractParams {
  std::string path;
  fs::PermissionSpec owner;
  bool replace = false;
  uint64_t max_entries = 0, max_bytes = 0;
  std::string state_dir;
};

// Makes an ArchiveUpload the exchange's Source (from the request's head):
// the body is spooled as it arrives and extracted once it is complete.
void start_archive_upload(FileService& svc, http::Exchange& ex, ExtractParams params);

}  // namespace execd::files
