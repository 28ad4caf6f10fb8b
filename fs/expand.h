// fs/expand: the Go daemon's path expansion: `$NAME` and `${NAME}`
// substituted from an environment lookup, then a leading `~` or `~/` replaced
// by the home directory. Pure string work, no file system access.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace execd::fs {

using EnvLookup = std::function<const char*(std::string_view name)>;

// Substitutes variables. An undefined variable is an error ("path references
// undefined environment variables: A,B", names sorted) unless
// `allow_undefined`, in which case it becomes empty. Shell-special forms
// (`$1`, `$$`, `$*`) become empty, as with Go's os.Expand.
bool expand_vars(std::string_view in, const EnvLookup& lookup, std::string& out, std::string& error,
                 bool allow_undefined);

}  // namespace execd::fs
