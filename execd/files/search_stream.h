// execd/files/search_stream: a file search (GET /files/search) streamed as
// one JSON array. Each step walks a bounded slice of the tree on the pool
// (fs/search, through the file gate); the next step is queued only once the
// client has taken the last one, so a slow client holds no thread and no
// growing buffer, and a client that leaves stops the walk at once (the step
// in flight sees `cancelled`). A search that ends within its first step is
// answered with Content-Length.
#pragma once

#include <string>

#include "execd/files/file_service.h"
#include "execd/http/exchange.h"

namespace execd::files {

// Searches under `root` ($VAR and ~ expanded) for names matching `pattern`
// (empty: every file), as svc's user and in its mount namespace.
void send_search(const FileService& svc, http::Exchange& ex, std::string root, std::string pattern);

}  // namespace execd::files
