// execd/api/journal: the routes of the execution journal (the journal
// itself, its readers and verification are execd/journal's):
//   GET /journal?since=<seq>[&follow=true]   entries with seq > since, NDJSON
//   GET /journal/verify                      re-walks the chain
//   POST /journal/events                     a harness's own events, appended
//                                            to the chain (type "harness")
#pragma once

#include "execd/journal/journal.h"
#include "execd/routes.h"

namespace execd::api {

void add_journal_routes(RouteTable& routes, journal::Journal& journal);

}  // namespace execd::api
