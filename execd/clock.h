// execd/clock: wall-clock time as execd's records, events and answers carry
// it. Its own header, apart from execd/context, so that code that only needs
// a timestamp does not depend on the daemon's wiring.
#pragma once

#include <cstdint>
#include <string>

namespace execd {

// Nanoseconds since the Unix epoch (CLOCK_REALTIME).
int64_t unix_ns();
// Milliseconds since the Unix epoch (event timestamps).
int64_t unix_ms();
// RFC 3339 with nanoseconds in the local zone, like Go's time.Time JSON.
std::string rfc3339_nano(int64_t unix_ns);

}  // namespace execd
