// execd/lifecycle/status_file: the startup status file bootstrap.sh watches
// (--lifecycle-startup-status-file; OpenSandbox main.go @714cac6b,
// appendLifecycleStartupStatus). One line per step, appended to a file
// bootstrap made: "running <seconds>" before preStart hooks (the watchdog
// waits that long plus 10 s), then "done 0" or "done 1". The file is never
// created: if bootstrap's file is gone, startup must fail on both sides.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace execd::lifecycle {

// Appends `line` + "\n" to `path` (O_WRONLY|O_APPEND, no O_CREAT);
// "" or why not. Blocking, but one small write to a local file.
std::string append_lifecycle_status(const std::string& path, const std::string& line);

// Where OpenSandbox keeps the lifecycle configuration (lifecycle/config.go
// @714cac6b): EXECD_LIFECYCLE_CONFIG if set, else $HOME/.execd/lifecycle.toml
// ("" without either), looked up in `env` ("K=V" strings).
std::string lifecycle_config_path(const std::vector<std::string>& env);

}  // namespace execd::lifecycle
