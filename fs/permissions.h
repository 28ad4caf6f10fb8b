// fs/permissions.h — the {"owner","group","mode"} permission spec used by
// /files/permissions, /directories and upload metadata (decoded by
// protocol/file_requests): resolving names to ids (before anything is
// touched), and applying chown + chmod.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "fs/error.h"

namespace execd::fs {

// As requested. Absent (or null, or "" for names) = leave that attribute alone.
struct PermissionSpec {
  std::optional<std::string> owner;
  std::optional<std::string> group;
  std::optional<mode_t> mode;  // present even when it is 0: an explicit 0 means chmod 000
};

// Ids and mode ready to apply; produced by resolve_permissions.
struct ResolvedPermissions {
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
  std::optional<mode_t> mode;
  bool changes_owner() const { return uid.has_value() || gid.has_value(); }
};

// Looks owner/group names up (numeric strings accepted as ids).
// Unknown name -> bad_request "unknown user: x" / "unknown group: x".
Result<ResolvedPermissions> resolve_permissions(const PermissionSpec& spec);

// chown (only the given ids, never a fallback to execd's own) then chmod (if
// mode given; chmod after chown because chown clears setuid/setgid). Follows
// symlinks, like chmod(2). `path` is also used in error messages.
Status apply_permissions(const std::string& path, const ResolvedPermissions& permissions);
Status apply_permissions_fd(int fd, const std::string& path_for_errors,
                            const ResolvedPermissions& permissions);

}  // namespace execd::fs
