// execd/files/download: sending a whole file or one byte range of it (GET
// /files/download, E2B's GET /files).
//
// A pool job opens and validates the file and builds the head; the body then
// goes through the connection's write queue as a file range, sent with
// sendfile(2) from the loop as the socket drains (FileSender, the exchange's
// Source). So that the loop never waits for the disk, a pool job reads ahead
// (readahead(2)) the next window of the file before the connection gets to it.
#pragma once

#include <string>

#include "execd/files/file_service.h"
#include "execd/http/exchange.h"

namespace execd::files {

// The file at `path` ($VAR and ~ expanded), as svc's user and in its mount
// namespace: whole, or the single range the request's Range header asks for.
void send_file(FileService& svc, http::Exchange& ex, std::string path);

// E2B: `path` against `user`'s home, no variables expanded.
void send_envd_file(FileService& svc, http::Exchange& ex, std::string path, std::string user);

}  // namespace execd::files
