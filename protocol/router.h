// protocol/router: maps a method and path to a handler id and path parameters.
// Patterns are literal segments and ":name" captures of one non-empty segment.
// Knows nothing of what handlers do; the owner stores whatever it routes to.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace execd::protocol {

struct RouteParams {
  std::vector<std::pair<std::string, std::string>> values;
  const std::string& get(std::string_view name) const;
};

template <typename Target>
class Router {
 public:
  void add(std::string method, std::string pattern, Target target) {
    routes_.push_back({std::move(method), split(pattern), std::move(target)});
  }

  enum class Outcome { found, not_found, method_not_allowed };
  struct Match {
    Outcome outcome = Outcome::not_found;
    const Target* target = nullptr;
    RouteParams params;
    std::string allow;  // for 405
  };

  Match match(std::string_view method, std::string_view path) const {
    Match m;
    std::vector<std::string_view> segs = split_view(path);
    for (const auto& r : routes_) {
      RouteParams params;
      if (!segments_match(r.segments, segs, params)) continue;
      if (r.method == method) {
        m.outcome = Outcome::found;
        m.target = &r.target;
        m.params = std::move(params);
        return m;
      }
      m.outcome = Outcome::method_not_allowed;
      if (m.allow.find(r.method) == std::string::npos) {
        if (!m.allow.empty()) m.allow += ", ";
        m.allow += r.method;
      }
    }
    return m;
  }

 private:
  struct Route {
    std::string method;
    std::vector<std::string> segments;
    Target target;
  };

  static std::vector<std::string> split(std::string_view path) {
    std::vector<std::string> out;
    for (auto s : split_view(path)) out.emplace_back(s);
    return out;
  }
  static std::vector<std::string_view> split_view(std::string_view path);
  static bool segments_match(const std::vector<std::string>& pattern, const std::vector<std::string_view>& segs,
                             RouteParams& params);

  std::vector<Route> routes_;
};

// Splits "/a/b/" into {"a","b",""}: a trailing slash is a distinct (empty)
// segment, so "/ping/" does not match "/ping".
std::vector<std::string_view> split_path(std::string_view path);
bool match_segments(const std::vector<std::string>& pattern, const std::vector<std::string_view>& segs,
                    RouteParams& params);

template <typename T>
std::vector<std::string_view> Router<T>::split_view(std::string_view path) { return split_path(path); }
template <typename T>
bool Router<T>::segments_match(const std::vector<std::string>& pattern, const std::vector<std::string_view>& segs,
                               RouteParams& params) {
  return match_segments(pattern, segs, params);
}

}  // namespace execd::protocol
