// execd/files: the filesystem API (contract section 8) as HTTP routes:
// /files/info, DELETE /files, /files/permissions, /files/mv, /files/search,
// /files/replace, /files/upload, /files/download, /directories/list,
// POST /directories, DELETE /directories. Handlers are thin: they validate
// the query or body, run the fs/ operation on the libuv threadpool and map
// its result to a response. Upload and download live in upload.cc and
// download.cc because they stream.
#pragma once

#include "execd/context.h"
#include "execd/routes.h"

namespace execd {

// Registers every filesystem route. Call once, before the loop runs: it also
// raises the libuv threadpool size (UV_THREADPOOL_SIZE, unless already set)
// so that slow uploads/downloads never starve command start-up.
void register_file_routes(Routes& routes, Context& ctx);

}  // namespace execd
