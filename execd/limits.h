// execd/limits: the caps on what a client can make execd keep (code
// contexts, bash sessions, terminals, running executions, resume readers,
// journal followers, proxied tunnels), each a flag, and the descriptors kept
// in reserve so that /ping, DELETEs and the status routes always work. A
// refusal comes before the resource is taken: 429 LIMIT_REACHED naming the
// flag, or 503 OUT_OF_DESCRIPTORS.
#pragma once

#include <cstddef>
#include <string_view>

#include "execd/http/exchange.h"

namespace execd {

// `in_use` of what `flag` caps at `cap`: true if one more fits; else 429
// LIMIT_REACHED is answered on `ex` and false returned.
bool admit(http::Exchange& ex, size_t in_use, size_t cap, std::string_view what, std::string_view flag);

// True if `need` more descriptors leave the reserve free (the larger of 64
// and an eighth of the open-files limit, as connections leave it); else 503
// OUT_OF_DESCRIPTORS is answered on `ex` and false returned.
bool admit_descriptors(http::Exchange& ex, size_t need, std::string_view what);

// Descriptors open in this process, and how many it may have.
size_t descriptors_open();
size_t descriptors_limit();

}  // namespace execd
