// execd/logging: execd's log, as --log-level and --log-format ask: one line
// per message on stderr (the container's log), plain text or one JSON object.
#pragma once

#include "execd/config.h"

namespace execd {

// Makes spdlog's default logger write to stderr at cfg.log_level (a name,
// or the Go execd's 0-7) in cfg.log_format.
void setup_logging(const Config& cfg);

}  // namespace execd
