// execd/files/download_headers: the response headers a file download or an
// archive is sent with: Content-Disposition for a file name, HTTP dates.
#pragma once

#include <ctime>
#include <string>
#include <string_view>

namespace execd::files {

// `attachment; filename="<name>"` for printable ASCII names (with `"` and `\`
// escaped); otherwise the quoted form holds the percent-encoded name and
// `filename*=UTF-8''<pct>` (RFC 6266 / 8187) carries the real one. Control
// characters never reach the header.
std::string content_disposition(std::string_view file_name);

// IMF-fixdate, e.g. "Sun, 06 Nov 1994 08:49:37 GMT".
std::string http_date(time_t t);

}  // namespace execd::files
