// execd/download: GET /files/download — streams a file from disk to the
// socket with sendfile(2) on the threadpool, with single-range support, and
// the header helpers that go with it (Content-Disposition, HTTP dates).
//
// How the body is sent: the response head and body are written by a pool
// thread on a dup() of the socket, in slices of at most 16 MiB / 100 ms, so a
// slow client never pins a pool thread for long; when the socket stays full
// for a whole slice the job waits on the loop (uv_poll, writable) before the
// next slice. Nothing else writes to the socket meanwhile: the connection
// answers one request at a time and the loop has nothing queued for it.
#pragma once

#include <ctime>
#include <string>
#include <string_view>

#include "execd/context.h"
#include "execd/routes.h"

namespace execd {

void register_download_route(Routes& routes, Context& ctx);

// `attachment; filename="<name>"` for printable ASCII names (with `"` and `\`
// escaped); otherwise the quoted form holds the percent-encoded name and
// `filename*=UTF-8''<pct>` (RFC 6266 / 8187) carries the real one. Control
// characters never reach the header.
std::string content_disposition(std::string_view file_name);

// IMF-fixdate, e.g. "Sun, 06 Nov 1994 08:49:37 GMT".
std::string http_date(time_t t);

}  // namespace execd
