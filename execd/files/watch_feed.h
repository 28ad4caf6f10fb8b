// execd/files/watch_feed: a file-change feed (GET /files/watch), the
// exchange's Source over one watch of the hub's (execd/watch). The first
// line names the watch, its newest seq and the seq the feed continues after,
// then (for `since`) the retained events after it, or one `gap` saying from
// where it continues, then live events, paced by the client (pulled from the
// watch's ring: a client that falls behind the ring gets a gap, never an
// unbounded buffer), with a ping line every 15 s. A `gone` event (the root
// went away) ends the response. No line's `seq` is ahead of the events the
// feed has sent: a client may resume from the highest `seq` it read,
// whichever line carried it.
#pragma once

#include <cstdint>
#include <optional>

#include "execd/http/exchange.h"
#include "execd/watch/watch.h"

namespace execd::files {

// Makes the feed of `w` (leased from `hub`; the feed releases it) the
// exchange's Source and sends its first lines.
void start_watch_feed(http::Exchange& ex, watch::Hub& hub, watch::Watch& w, std::optional<uint64_t> since);

}  // namespace execd::files
