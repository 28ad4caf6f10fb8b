// protocol/router: see header.
#include "protocol/router.h"

namespace execd::protocol {

const std::string& RouteParams::get(std::string_view name) const {
  static const std::string kEmpty;
  for (const auto& [k, v] : values)
    if (k == name) return v;
  return kEmpty;
}

std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> out;
  if (!path.empty() && path[0] == '/') path.remove_prefix(1);
  while (true) {
    size_t slash = path.find('/');
    out.push_back(path.substr(0, slash));
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return out;
}

bool match_segments(const std::vector<std::string>& pattern, const std::vector<std::string_view>& segs,
                    RouteParams& params) {
  if (pattern.size() != segs.size()) return false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const std::string& p = pattern[i];
    if (!p.empty() && p[0] == ':') {
      if (segs[i].empty()) return false;
      params.values.emplace_back(p.substr(1), std::string(segs[i]));
    } else if (p != segs[i]) {
      return false;
    }
  }
  return true;
}

}  // namespace execd::protocol
