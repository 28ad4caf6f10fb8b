// fs/paths.cc — Expand / ExpandAbs on top of fs/expand.h, and lexical helpers.
#include "fs/paths.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

#include "fs/accounts.h"

namespace execd::fs {
namespace {

std::string home_directory(const EnvLookup& env) {
  if (const char* home = env("HOME"); home && *home) return home;
  if (auto a = account_with_uid(getuid()); a && !a->home.empty()) return a->home;
  return "/";
}

}  // namespace

EnvLookup process_env_lookup() {
  return [](std::string_view name) -> const char* {
    std::string key(name);
    return std::getenv(key.c_str());
  };
}

Result<std::string> expand_path(std::string_view path, const EnvLookup& env) {
  if (path.empty()) return Error{ErrorKind::bad_request, "path must not be empty"};
  if (path.find('\0') != std::string_view::npos) {
    return Error{ErrorKind::bad_request, "path must not contain NUL bytes"};
  }
  std::string out;
  std::string error;
  if (!expand_vars(path, env, out, error, /*allow_undefined=*/false)) {
    return Error{ErrorKind::bad_request, std::move(error)};
  }
  if (out == "~" || out.starts_with("~/")) out = home_directory(env) + out.substr(1);
  if (out.empty()) return Error{ErrorKind::bad_request, "path is empty after expansion: " + std::string(path)};
  return out;
}

Result<std::string> expand_path_abs(std::string_view path, const EnvLookup& env) {
  auto expanded = expand_path(path, env);
  if (!expanded) return expanded;
  std::string& p = expanded.value();
  if (p.front() != '/') {
    std::vector<char> cwd(4096);
    while (getcwd(cwd.data(), cwd.size()) == nullptr) {
      if (errno != ERANGE) return errno_error(errno, "getcwd");
      cwd.resize(cwd.size() * 2);
    }
    p = join_path(cwd.data(), p);
  }
  return clean_path(p);
}

std::string clean_path(std::string_view path) {
  if (path.empty()) return ".";
  const bool rooted = path.front() == '/';
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    std::string_view part = path.substr(i, j - i);
    i = j + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!parts.empty() && parts.back() != "..") {
        parts.pop_back();
      } else if (!rooted) {
        parts.push_back(part);  // a relative path keeps its leading ".."
      }
      continue;
    }
    parts.push_back(part);
  }
  std::string out = rooted ? "/" : "";
  for (size_t k = 0; k < parts.size(); ++k) {
    if (k > 0) out += '/';
    out += parts[k];
  }
  return out.empty() ? "." : out;
}

std::string parent_path(std::string_view clean) {
  size_t slash = clean.rfind('/');
  if (slash == std::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(clean.substr(0, slash));
}

std::string base_name(std::string_view clean) {
  if (clean == "/") return "/";
  size_t slash = clean.rfind('/');
  if (slash == std::string_view::npos) return std::string(clean);
  return std::string(clean.substr(slash + 1));
}

std::string join_path(std::string_view dir, std::string_view name) {
  std::string out(dir);
  if (out.empty() || out.back() != '/') out += '/';
  out += name;
  return out;
}

}  // namespace execd::fs
