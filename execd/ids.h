// execd/ids: random identifiers for what execd names (executions, sessions,
// contexts, watches...). Its own header, apart from execd/context, so that
// code that only needs an id does not depend on the daemon's wiring.
#pragma once

#include <string>

namespace execd {

// 32 lowercase hex characters from the kernel's CSPRNG (a UUIDv4 without dashes).
std::string random_id32();
// A UUIDv4 with dashes.
std::string random_uuid();

}  // namespace execd
