// fs/xattrs: see header.
#include "fs/xattrs.h"

#include <sys/xattr.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace execd::fs {

std::map<std::string, std::string> read_xattrs(const std::string& path, std::string_view prefix) {
  std::map<std::string, std::string> out;
  // Sized by asking first; a list that grows in between is read again.
  std::vector<char> names;
  for (int attempt = 0; attempt < 3; ++attempt) {
    ssize_t n = llistxattr(path.c_str(), nullptr, 0);
    if (n <= 0) return out;
    names.resize(static_cast<size_t>(n));
    n = llistxattr(path.c_str(), names.data(), names.size());
    if (n >= 0) {
      names.resize(static_cast<size_t>(n));
      break;
    }
    if (errno != ERANGE) return out;
    names.clear();
  }
  for (size_t i = 0; i < names.size();) {
    std::string_view name(names.data() + i);
    i += name.size() + 1;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    std::string full(name);
    ssize_t len = lgetxattr(path.c_str(), full.c_str(), nullptr, 0);
    if (len < 0) continue;
    std::string value(static_cast<size_t>(len), '\0');
    len = lgetxattr(path.c_str(), full.c_str(), value.data(), value.size());
    if (len < 0) continue;
    value.resize(static_cast<size_t>(len));
    out.emplace(std::string(name.substr(prefix.size())), std::move(value));
  }
  return out;
}

Status write_xattrs(int fd, const std::string& shown_path, std::string_view prefix,
                    const std::map<std::string, std::string>& values) {
  for (const auto& [key, value] : values) {
    std::string name = std::string(prefix) + key;
    if (fsetxattr(fd, name.c_str(), value.data(), value.size(), 0) == 0) continue;
    int e = errno;
    if (e == ENOTSUP)
      return Error{ErrorKind::bad_request, "the filesystem of " + shown_path + " keeps no extended attributes (" +
                                               name + ")"};
    if (e == ERANGE || e == E2BIG || e == ENOSPC)
      return Error{ErrorKind::bad_request, "metadata " + key + " does not fit in the extended attributes of " +
                                               shown_path + ": " + strerror(e)};
    return errno_error(e, "set " + name + " on " + shown_path);
  }
  return Status::success();
}

}  // namespace execd::fs
