// fs/expand: see header.
#include "fs/expand.h"

#include <algorithm>
#include <set>

namespace execd::fs {
namespace {
bool alnum(char c) {
  return c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}
bool special(char c) {
  return c == '*' || c == '#' || c == '$' || c == '@' || c == '!' || c == '?' || c == '-' || (c >= '0' && c <= '9');
}

// Go's getShellName: the variable name after a '$' and how many bytes the
// reference takes. An empty name with a width means bad syntax (eaten); an
// empty name with width 0 leaves the '$' as it is.
std::string_view shell_name(std::string_view s, size_t& width, bool& is_special) {
  is_special = false;
  if (s[0] == '{') {
    if (s.size() > 2 && special(s[1]) && s[2] == '}') {
      is_special = true;
      width = 3;
      return s.substr(1, 1);
    }
    for (size_t i = 1; i < s.size(); ++i) {
      if (s[i] == '}') {
        width = i + 1;
        return i == 1 ? std::string_view() : s.substr(1, i - 1);
      }
    }
    width = 1;  // "${" without "}": only "${" is eaten
    return {};
  }
  if (special(s[0])) {
    is_special = true;
    width = 1;
    return s.substr(0, 1);
  }
  size_t i = 0;
  while (i < s.size() && alnum(s[i])) ++i;
  width = i;
  return s.substr(0, i);
}
}  // namespace

bool expand_vars(std::string_view in, const EnvLookup& lookup, std::string& out, std::string& error,
                 bool allow_undefined) {
  out.clear();
  std::set<std::string> missing;
  size_t i = 0;
  for (size_t j = 0; j < in.size(); ++j) {
    if (in[j] != '$' || j + 1 >= in.size()) continue;
    out.append(in.substr(i, j - i));
    size_t width = 0;
    bool is_special = false;
    std::string_view name = shell_name(in.substr(j + 1), width, is_special);
    if (name.empty() && width == 0) {
      out.push_back('$');  // "$" not followed by a name stays
    } else if (!name.empty() && !is_special) {
      std::string n(name);
      if (const char* v = lookup(n)) out += v;
      else if (!allow_undefined) missing.insert(n);
    }
    // Special parameters ($1, $$, ...) and bad syntax expand to nothing.
    j += width;
    i = j + 1;
  }
  if (i < in.size()) out.append(in.substr(i));
  if (!missing.empty()) {
    error = "path references undefined environment variables: ";
    bool first = true;
    for (const auto& m : missing) {
      if (!first) error += ',';
      error += m;
      first = false;
    }
    return false;
  }
  return true;
}

}  // namespace execd::fs
