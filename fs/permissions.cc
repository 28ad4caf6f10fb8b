// fs/permissions.cc — permission spec parsing, resolution and application.
#include "fs/permissions.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "fs/file_info.h"

namespace execd::fs {
namespace {

Result<std::optional<std::string>> optional_string(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::optional<std::string>();
  if (!it->is_string()) return Error{ErrorKind::bad_request, std::string("'") + key + "' must be a string"};
  std::string value = it->get<std::string>();
  if (value.empty()) return std::optional<std::string>();
  return std::optional<std::string>(std::move(value));
}

}  // namespace

Result<PermissionSpec> parse_permission_spec(const nlohmann::json& object) {
  if (!object.is_object()) return Error{ErrorKind::bad_request, "permission entry must be a JSON object"};
  PermissionSpec spec;
  auto owner = optional_string(object, "owner");
  if (!owner) return owner.error();
  spec.owner = std::move(owner.value());
  auto group = optional_string(object, "group");
  if (!group) return group.error();
  spec.group = std::move(group.value());

  auto mode = object.find("mode");
  if (mode != object.end() && !mode->is_null()) {
    if (!mode->is_number_integer()) {
      return Error{ErrorKind::bad_request, "'mode' must be an integer of octal digits, e.g. 755"};
    }
    int64_t digits = mode->is_number_unsigned() && mode->get<uint64_t>() > 7777
                         ? int64_t{7778}
                         : mode->get<int64_t>();
    auto parsed = mode_from_octal_digits(digits);
    if (!parsed) return parsed.error();
    spec.mode = parsed.value();
  }
  return spec;
}

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
