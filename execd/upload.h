// execd/upload: POST /files/upload — the multipart body is parsed as it
// arrives (protocol/multipart) and each file is written through
// fs::AtomicFile by a per-upload writer on the threadpool.
//
// * Pairing: each `file` part belongs to the oldest `metadata` part not yet
//   paired, so a metadata part must come before its file part (every SDK does
//   this; the Go daemon also accepted files first). Parts with other names
//   are ignored. A `metadata` part may be a plain form field or a file part.
// * Memory stays flat: file data goes to the writer in 1 MiB aligned pieces;
//   above 3 MiB waiting for the writer the socket is paused, below 1 MiB
//   resumed. Writes of one upload run strictly in order, one pool job at a
//   time. Temp files use O_DIRECT where the filesystem allows it (see
//   fs::AtomicFile::enable_direct_io): no page-cache copy, a cheap final fsync.
// * All or nothing: every file is written to a temp file next to its target
//   and flushed (fsync, mode, owner) when its part ends; only when the whole
//   body was valid and every file flushed are they renamed into place, in
//   order. Any failure (bad multipart, bad metadata, unknown owner, EACCES,
//   ENOSPC, client gone) removes every temp file and every directory the
//   upload created; no target is touched.
// * A rejected upload is answered only once its body has been read (and
//   discarded), so clients that send the whole body first still see the error.
#pragma once

#include "execd/context.h"
#include "execd/routes.h"

namespace execd {

void register_upload_route(Routes& routes, Context& ctx);

}  // namespace execd
