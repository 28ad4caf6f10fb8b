// fs/xattrs: user-defined file metadata kept as extended attributes (E2B's
// `user.e2b.*`: what `files.write(metadata=...)` sets and every entry info
// reports). Reading is best effort (a filesystem without xattrs has none);
// writing says why it failed.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "fs/error.h"

namespace execd::fs {

// The attributes of `path` (not following a symlink) whose names start with
// `prefix`, keyed by the rest of the name. Empty on any error.
std::map<std::string, std::string> read_xattrs(const std::string& path, std::string_view prefix);

// Sets `prefix + key` = value on the open file `fd`, for each entry.
// ENOTSUP (a filesystem that keeps none) and the size limits are errors.
Status write_xattrs(int fd, const std::string& shown_path, std::string_view prefix,
                    const std::map<std::string, std::string>& values);

}  // namespace execd::fs
