// execd/api/download: GET /files/download with single-range support, and the
// header helpers that go with it (Content-Disposition, HTTP dates).
//
// A pool job opens and validates the file and builds the head; the body then
// goes through the connection's write queue as a file range, sent with
// sendfile(2) from the loop as the socket drains. So that the loop never
// waits for the disk, a pool job reads ahead (readahead(2)) the next window
// of the file before the connection gets to it.
#pragma once

#include <ctime>
#include <string>
#include <string_view>


namespace execd::api {

// `attachment; filename="<name>"` for printable ASCII names (with `"` and `\`
// escaped); otherwise the quoted form holds the percent-encoded name and
// `filename*=UTF-8''<pct>` (RFC 6266 / 8187) carries the real one. Control
// characters never reach the header.
std::string content_disposition(std::string_view file_name);

// IMF-fixdate, e.g. "Sun, 06 Nov 1994 08:49:37 GMT".
std::string http_date(time_t t);

}  // namespace execd::api
