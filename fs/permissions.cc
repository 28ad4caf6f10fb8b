// fs/permissions.cc — permission spec parsing, resolution and application.
#include "fs/permissions.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "fs/file_info.h"

namespace execd::fs {
Result<ResolvedPermissions> resolve_permissions(const PermissionSpec& spec) {
  ResolvedPermissions resolved;
  resolved.mode = spec.mode;
  if (spec.owner) {
    resolved.uid = uid_for_name(*spec.owner);
    if (!resolved.uid) return Error{ErrorKind::bad_request, "unknown user: " + *spec.owner};
  }
  if (spec.group) {
    resolved.gid = gid_for_name(*spec.group);
    if (!resolved.gid) return Error{ErrorKind::bad_request, "unknown group: " + *spec.group};
  }
  return resolved;
}

Status apply_permissions(const std::string& path, const ResolvedPermissions& permissions) {
  if (permissions.changes_owner()) {
    uid_t uid = permissions.uid ? *permissions.uid : static_cast<uid_t>(-1);
    gid_t gid = permissions.gid ? *permissions.gid : static_cast<gid_t>(-1);
    if (chown(path.c_str(), uid, gid) != 0) return errno_error(errno, "chown " + path);
  }
  if (permissions.mode && chmod(path.c_str(), *permissions.mode) != 0) {
    return errno_error(errno, "chmod " + path);
  }
  return Status::success();
}

Status apply_permissions_fd(int fd, const std::string& path_for_errors, const ResolvedPermissions& permissions) {
  if (permissions.changes_owner()) {
    uid_t uid = permissions.uid ? *permissions.uid : static_cast<uid_t>(-1);
    gid_t gid = permissions.gid ? *permissions.gid : static_cast<gid_t>(-1);
    if (fchown(fd, uid, gid) != 0) return errno_error(errno, "chown " + path_for_errors);
  }
  if (permissions.mode && fchmod(fd, *permissions.mode) != 0) {
    return errno_error(errno, "chmod " + path_for_errors);
  }
  return Status::success();
}

}  // namespace execd::fs
