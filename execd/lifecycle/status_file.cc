// execd/lifecycle/status_file: see header.
#include "execd/lifecycle/status_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "execd/context.h"

namespace execd::lifecycle {

std::string append_lifecycle_status(const std::string& path, const std::string& line) {
  int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) return "open " + path + ": " + strerror(errno);
  std::string text = line + "\n";
  ssize_t n;
  do n = write(fd, text.data(), text.size());
  while (n < 0 && errno == EINTR);
  std::string err = n < 0 ? "write " + path + ": " + strerror(errno)
                    : static_cast<size_t>(n) != text.size() ? "short write to " + path
                                                            : std::string();
  if (close(fd) != 0 && err.empty()) err = "close " + path + ": " + strerror(errno);
  return err;
}

std::string lifecycle_config_path(const std::vector<std::string>& env) {
  if (const char* p = env_lookup(env, "EXECD_LIFECYCLE_CONFIG")) return p;
  const char* home = env_lookup(env, "HOME");
  if (!home || !*home) return {};
  return std::string(home) + "/.execd/lifecycle.toml";
}

}  // namespace execd::lifecycle
