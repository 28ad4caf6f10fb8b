// pty/cgroupfs: see header.
#include "pty/cgroupfs.h"

namespace execd::pty {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mount(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    auto octal = [&](size_t k) { return s[k] >= '0' && s[k] <= '7'; };
    if (s[i] == '\\' && i + 3 < s.size() && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

std::vector<std::string_view> split_fields(std::string_view s, std::string_view separators) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while ((i = s.find_first_not_of(separators, i)) != std::string_view::npos) {
    size_t end = s.find_first_of(separators, i);
    if (end == std::string_view::npos) end = s.size();
    out.push_back(s.substr(i, end - i));
    i = end;
  }
  return out;
}

std::vector<CgroupMount> parse_cgroup_mounts(std::string_view mountinfo) {
  std::vector<CgroupMount> out;
  for (std::string_view line : split_fields(mountinfo, "\n")) {
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    size_t dash = line.find(" - ");
    if (dash == std::string_view::npos) continue;
    std::vector<std::string_view> pre = split_fields(line.substr(0, dash), " ");
    std::vector<std::string_view> post = split_fields(line.substr(dash + 3), " ");
    if (pre.size() < 5 || post.size() < 3 || (post[0] != "cgroup" && post[0] != "cgroup2")) continue;
    CgroupMount m;
    m.root = unescape_mount(pre[3]);
    m.mount_point = unescape_mount(pre[4]);
    m.v2 = post[0] == "cgroup2";
    for (std::string_view opt : split_fields(post[2], ",")) m.options.emplace(opt);
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<CgroupMembership> parse_cgroup_memberships(std::string_view text) {
  std::vector<CgroupMembership> out;
  for (std::string_view line : split_fields(text, "\n")) {
    size_t a = line.find(':');
    size_t b = a == std::string_view::npos ? a : line.find(':', a + 1);
    if (b == std::string_view::npos) continue;
    CgroupMembership m;
    for (std::string_view c : split_fields(line.substr(a + 1, b - a - 1), ",")) m.controllers.emplace(c);
    m.path = std::string(line.substr(b + 1));
    m.unified = line.substr(0, a) == "0" && m.controllers.empty();
    out.push_back(std::move(m));
  }
  return out;
}

std::string cgroup_dir(const CgroupMount& m, const std::string& path) {
  std::string rel = path == "/" ? "" : path;
  if (m.root != "/") {
    if (path == m.root) rel.clear();
    else if (path.size() > m.root.size() && path.compare(0, m.root.size(), m.root) == 0 && path[m.root.size()] == '/')
      rel = path.substr(m.root.size());
  }
  return (m.mount_point == "/" ? "" : m.mount_point) + rel;
}

}  // namespace execd::pty
