// pty/cgroupfs: where the cgroup hierarchies are mounted and where this
// process sits in each, from the texts of /proc/self/mountinfo and
// /proc/self/cgroup. Pure parsers (text in, no I/O), shared by pty/cgroup
// (where commands' cgroups are made) and execd/metrics (which limits the
// sandbox has).
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace execd::pty {

// The pieces of `s` between any of `separators`, empty ones skipped (cgroup
// files: space- or newline-separated pids, controllers, counters). Parsing
// without iostreams keeps the C++ locale uninitialised in an idle daemon.
std::vector<std::string_view> split_fields(std::string_view s, std::string_view separators = " \t\n");

// A mount of a cgroup hierarchy ("cgroup" or "cgroup2" lines of mountinfo).
struct CgroupMount {
  std::string root;         // the cgroup path mounted there ("/" unless a namespace or bind mount)
  std::string mount_point;  // unescaped (mountinfo writes a space as \040)
  bool v2 = false;
  std::set<std::string> options;  // super options: on v1, the controllers (and name=, rw, ...)
};

std::vector<CgroupMount> parse_cgroup_mounts(std::string_view mountinfo);

// A line of /proc/self/cgroup: "id:controllers:path".
struct CgroupMembership {
  std::set<std::string> controllers;  // empty for the unified (v2) line
  std::string path;
  bool unified = false;  // "0::<path>"
};

std::vector<CgroupMembership> parse_cgroup_memberships(std::string_view proc_self_cgroup);

// The directory of cgroup `path` under mount `m`: the mount point plus the
// path relative to the mount's root. A path not under that root is taken as
// relative to it: a container whose mount shows its own cgroup as the root
// ("/docker/<id>") names "/" for itself, and a --cgroup-parent "/sandbox"
// means <its cgroup>/sandbox.
std::string cgroup_dir(const CgroupMount& m, const std::string& path);

}  // namespace execd::pty
