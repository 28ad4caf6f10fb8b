// protocol/track_request: the "track_changes" field that POST /command,
// POST /session/{id}/run and POST /code share: a list of roots (1 to 16
// non-empty strings without NUL bytes). Decoded with simdjson like the rest
// of those bodies; used by requests.cc and jupyter.cc only.
#pragma once

#include <simdjson.h>

#include <string>
#include <vector>

namespace execd::protocol {

inline constexpr size_t kMaxTrackRoots = 16;

// nullptr on success (`out` filled; null leaves it empty), else why not.
const char* decode_track_changes(simdjson::dom::element v, std::vector<std::string>& out);

}  // namespace execd::protocol
