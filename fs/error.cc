// fs/error.cc — errno classification and the kind -> HTTP mapping.
#include "fs/error.h"

#include <cerrno>
#include <cstring>

namespace execd::fs {

ErrorKind kind_for_errno(int errno_value) {
  switch (errno_value) {
    case ENOENT: return ErrorKind::not_found;
    case EACCES:
    case EPERM:
    case EROFS: return ErrorKind::forbidden;
    case ENOSPC:
    case EDQUOT: return ErrorKind::no_space;
    case EEXIST:
    case ENOTEMPTY:
    case EISDIR:
    case ENOTDIR:
    case EXDEV:
    case EBUSY: return ErrorKind::conflict;
    default: return ErrorKind::internal;
  }
}

std::string errno_text(int errno_value) {
  char buffer[256];
  // GNU strerror_r: returns a pointer that may or may not be `buffer`.
  const char* text = strerror_r(errno_value, buffer, sizeof buffer);
  return text;
}

Error errno_error(int errno_value, std::string_view what) {
  std::string message(what);
  message += ": ";
  message += errno_text(errno_value);
  return Error{kind_for_errno(errno_value), std::move(message)};
}

}  // namespace execd::fs
