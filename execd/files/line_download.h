// execd/files/line_download: a file's lines (GET /files/download?offset=&limit=)
// as a chunked text/plain body. The reader (fs/line_range) does blocking
// reads, so each chunk is read by a pool job; the reader travels with the
// job and comes back to the sender (LineSender, the exchange's Source) if it
// is still there (else the job frees it).
#pragma once

#include <string>

#include "execd/files/file_service.h"
#include "execd/http/exchange.h"
#include "protocol/query_values.h"

namespace execd::files {

// The lines of `path` ($VAR and ~ expanded) that `params` asks for.
void send_lines(FileService& svc, http::Exchange& ex, const std::string& path, protocol::LineRangeParams params);

}  // namespace execd::files
