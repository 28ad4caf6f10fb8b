// fs/paths.h — user path handling for the filesystem API (as the Go daemon expands them):
// Expand (variables via fs/expand.h, then leading ~), ExpandAbs (absolute
// against execd's cwd + lexical clean), and small lexical path helpers.
#pragma once

#include <string>
#include <string_view>

#include "fs/error.h"
#include "fs/expand.h"

namespace execd::fs {

// execd's own environment (getenv; safe as long as nobody calls setenv).
EnvLookup process_env_lookup();

// Expand: expand_vars (undefined variable -> error), then "~" / "~/..." ->
// $HOME (from `env`; passwd entry of execd's uid if unset). No ~user form.
// Errors, all bad_request: empty path, NUL byte, undefined variables
// ("path references undefined environment variables: A,B").
Result<std::string> expand_path(std::string_view path, const EnvLookup& env);

// ExpandAbs: expand_path, then absolute against execd's cwd, then clean_path.
Result<std::string> expand_path_abs(std::string_view path, const EnvLookup& env);

// Lexical clean with Go filepath.Clean semantics ("" -> ".", "/../a" -> "/a",
// "a//b/./c/.." -> "a/b", trailing slash dropped).
std::string clean_path(std::string_view path);
// For clean paths: "/a/b" -> "/a", "/a" -> "/", "a" -> ".".
std::string parent_path(std::string_view clean);
// For clean paths: "/a/b" -> "b", "/" -> "/".
std::string base_name(std::string_view clean);
// No cleaning: join_path("/a", "b") == "/a/b", join_path("/", "b") == "/b".
std::string join_path(std::string_view dir, std::string_view name);

}  // namespace execd::fs
