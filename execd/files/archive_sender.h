// execd/files/archive_sender: the archive of a directory (GET
// /files/archive), a chunked stream produced a piece at a time on the pool
// through the file gate (fs/archive does the formats), each piece only once
// the client has taken the last: no temporary copy of the tree, no unbounded
// buffer, and a client that leaves stops the walk. A file that cannot be read
// mid-way, or that shrinks or grows while it is read, cuts the connection
// (no last chunk): a truncated archive, never a silently incomplete one.
#pragma once

#include <string>

#include "execd/files/file_service.h"
#include "execd/http/exchange.h"
#include "fs/archive.h"

namespace execd::files {

// Streams the archive of the directory at `path` ($VAR and ~ expanded) in `format`.
void send_archive(FileService& svc, http::Exchange& ex, std::string path, fs::ArchiveFormat format);

}  // namespace execd::files
