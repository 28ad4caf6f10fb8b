// fs/expand: see header.
#include "fs/expand.h"

#include <algorithm>
#include <set>

namespace execd::fs {
namespace {
bool name_char(char c, bool first) {
  return c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (!first && c >= '0' && c <= '9');
}
}  // namespace

bool expand_vars(std::string_view in, const EnvLookup& lookup, std::string& out, std::string& error,
                 bool allow_undefined) {
  out.clear();
  std::set<std::string> missing;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '$' || i + 1 >= in.size()) {
      out.push_back(in[i]);
      continue;
    }
    std::string name;
    size_t j = i + 1;
    if (in[j] == '{') {
      size_t close = in.find('}', j);
      if (close == std::string_view::npos) {  // Go: "${" without "}" eats the rest
        i = in.size();
        break;
      }
      name.assign(in.substr(j + 1, close - j - 1));
      i = close;
    } else if (name_char(in[j], true)) {
      size_t k = j;
      while (k < in.size() && name_char(in[k], k == j)) ++k;
      name.assign(in.substr(j, k - j));
      i = k - 1;
    } else {
      // Special single-character forms ($1, $$, $*, ...) expand to nothing.
      i = j;
      continue;
    }
    if (name.empty()) continue;
    const char* v = lookup(name);
    if (v) out += v;
    else if (!allow_undefined) missing.insert(name);
  }
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
