// execd/metrics/sampler: see header.
#include "execd/metrics/sampler.h"

#include "fs/small_file.h"
#include "pty/cgroupfs.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string_view>
#include <vector>

namespace execd::metrics {

using pty::CgroupMembership;
using pty::CgroupMount;
using pty::parse_cgroup_memberships;
using pty::parse_cgroup_mounts;

const char* metric_source_name(MetricSource source) {
  switch (source) {
    case MetricSource::none: return "none";
    case MetricSource::cgroup_v1: return "cgroup_v1";
    case MetricSource::cgroup_v2: return "cgroup_v2";
    case MetricSource::proc: return "proc";
    case MetricSource::affinity: return "affinity";
  }
  return "none";
}

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

bool file_exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

std::string trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

std::optional<double> parse_number(std::string_view s) {
  std::string t = trim(s);
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(t.c_str(), &end);
  if (errno || *end) return std::nullopt;
  return v;
}

std::optional<double> read_number(const std::string& path) {
  auto text = fs::read_small_file(path);
  if (!text) return std::nullopt;
  return parse_number(*text);
}

// "key value" lines (memory.stat, cpu.stat) or "Key:   value kB" (/proc/meminfo).
std::optional<double> keyed_value(const std::string& text, std::string_view key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    if (line.size() > key.size() && line.substr(0, key.size()) == key &&
        (line[key.size()] == ' ' || line[key.size()] == ':' || line[key.size()] == '\t')) {
      std::string_view rest = line.substr(key.size() + 1);
      std::string t = trim(rest);
      if (t.size() > 3 && t.compare(t.size() - 3, 3, " kB") == 0) {
        auto v = parse_number(std::string_view(t).substr(0, t.size() - 3));
        if (v) return *v * 1024;
        return std::nullopt;
      }
      return parse_number(t);
    }
  }
  return std::nullopt;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  for (;;) {
    size_t next = s.find(sep, pos);
    out.push_back(s.substr(pos, next == std::string_view::npos ? std::string_view::npos : next - pos));
    if (next == std::string_view::npos) break;
    pos = next + 1;
  }
  return out;
}

// Directories from `dir` up to and including `top` (dir must be under top).
std::vector<std::string> ancestors(const std::string& dir, const std::string& top) {
  std::vector<std::string> out;
  std::string d = dir;
  for (;;) {
    out.push_back(d);
    if (d.size() <= top.size()) break;
    size_t slash = d.rfind('/');
    if (slash == std::string::npos || slash < top.size()) {
      if (d != top) out.push_back(top);
      break;
    }
    d = d.substr(0, slash);
  }
  return out;
}

int64_t default_wall_ms() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

int64_t default_monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int default_affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

// gopsutil v3.21.11 (the version upstream pins): busy = user + nice + system +
// iowait + irq + softirq + steal (iowait counts as busy; guest is already in
// user/nice), total = busy + idle.
bool read_proc_stat(const std::string& path, double& total, double& busy) {
  auto text = fs::read_small_file(path);
  if (!text) return false;
  for (std::string_view line : split(*text, '\n')) {
    if (line.substr(0, 4) != "cpu ") continue;
    std::vector<double> v;
    for (std::string_view f : split(line.substr(4), ' ')) {
      if (f.empty()) continue;
      auto n = parse_number(f);
      if (!n) return false;
      v.push_back(*n);
    }
    if (v.size() < 4) return false;
    v.resize(10, 0.0);  // user nice system idle iowait irq softirq steal guest guest_nice
    double t = 0;
    for (int i = 0; i < 8; ++i) t += v[i];
    total = t;
    busy = t - v[3];
    return true;
  }
  return false;
}

}  // namespace

MetricsSampler::MetricsSampler() : MetricsSampler(Options{}) {}

MetricsSampler::MetricsSampler(Options options) : opt_(std::move(options)) {
  if (!opt_.wall_ms) opt_.wall_ms = default_wall_ms;
  if (!opt_.monotonic_ns) opt_.monotonic_ns = default_monotonic_ns;
  if (!opt_.affinity_cpus) opt_.affinity_cpus = default_affinity_cpus;

  auto mountinfo = fs::read_small_file(opt_.root + "/proc/self/mountinfo");
  auto self = fs::read_small_file(opt_.root + "/proc/self/cgroup");
  if (!mountinfo || !self) return;
  std::vector<CgroupMount> mounts = parse_cgroup_mounts(*mountinfo);
  std::vector<CgroupMembership> own = parse_cgroup_memberships(*self);
  auto mount_dir = [&](const CgroupMount& m) { return opt_.root + (m.mount_point == "/" ? "" : m.mount_point); };

  auto find_v1 = [&](const std::string& controller, std::string& dir, std::string& mount, int& version,
                     bool& root) -> bool {
    for (const CgroupMembership& o : own) {
      if (o.unified || !o.controllers.count(controller)) continue;
      for (const CgroupMount& m : mounts) {
        if (m.v2 || !m.options.count(controller)) continue;
        dir = opt_.root + cgroup_dir(m, o.path);
        mount = mount_dir(m);
        if (mount.empty()) mount = "/";
        version = 1;
        root = o.path == "/";
        return true;
      }
    }
    return false;
  };
  std::string v2_dir, v2_mount;
  for (const CgroupMembership& o : own) {
    if (!o.unified) continue;
    for (const CgroupMount& m : mounts) {
      if (!m.v2) continue;
      v2_dir = opt_.root + cgroup_dir(m, o.path);
      v2_mount = mount_dir(m);
      break;
    }
  }
  auto controllers_v2 = [&]() -> std::string {
    auto text = fs::read_small_file(v2_dir + "/cgroup.controllers");
    return text ? *text : std::string();
  };
  const std::string v2_controllers = v2_dir.empty() ? "" : trim(controllers_v2());
  auto v2_has = [&](std::string_view c) {
    for (std::string_view w : split(v2_controllers, ' '))
      if (w == c) return true;
    return false;
  };
  bool v2_root = v2_dir.empty() || !file_exists(v2_dir + "/cgroup.type");

  std::string unused;
  // CPU limit.
  if (!find_v1("cpu", dirs_.cpu, cpu_mount_, dirs_.cpu_version, dirs_.cpu_root) && !v2_dir.empty() &&
      v2_has("cpu")) {
    dirs_.cpu = v2_dir;
    cpu_mount_ = v2_mount;
    dirs_.cpu_version = 2;
    dirs_.cpu_root = v2_root;
  }
  // CPU usage: v2 cpu.stat exists in every non-root cgroup, controller or not.
  if (!find_v1("cpuacct", dirs_.cpuacct, unused, dirs_.cpuacct_version, dirs_.cpuacct_root) && !v2_dir.empty()) {
    dirs_.cpuacct = v2_dir;
    dirs_.cpuacct_version = 2;
    dirs_.cpuacct_root = v2_root;
  }
  // Memory.
  if (!find_v1("memory", dirs_.memory, memory_mount_, dirs_.memory_version, dirs_.memory_root) &&
      !v2_dir.empty() && v2_has("memory")) {
    dirs_.memory = v2_dir;
    memory_mount_ = v2_mount;
    dirs_.memory_version = 2;
    dirs_.memory_root = v2_root;
  }
}

MetricsSample MetricsSampler::sample() {
  MetricsSample s;
  s.timestamp_ms = opt_.wall_ms();
  const std::string proc = opt_.root + "/proc";
  struct statvfs vfs {};
  if (statvfs((opt_.root.empty() ? std::string("/") : opt_.root).c_str(), &vfs) == 0) {
    s.disk_total_bytes = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
    s.disk_used_bytes = static_cast<uint64_t>(vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize;
  }
  auto v_source = [](int version) { return version == 2 ? MetricSource::cgroup_v2 : MetricSource::cgroup_v1; };

  // ---- CPU count -----------------------------------------------------------
  double cpus = std::max(1, opt_.affinity_cpus());
  s.cpu_count = cpus;
  s.cpu_count_source = MetricSource::affinity;
  if (!dirs_.cpu.empty()) {
    std::optional<double> limit;
    for (const std::string& dir : ancestors(dirs_.cpu, cpu_mount_)) {
      std::optional<double> here;
      if (dirs_.cpu_version == 2) {
        auto text = fs::read_small_file(dir + "/cpu.max");
        if (text) {
          const std::string line = trim(*text);
          auto fields = split(line, ' ');
          if (fields.size() == 2 && fields[0] != "max") {
            auto quota = parse_number(fields[0]), period = parse_number(fields[1]);
            if (quota && period && *quota > 0 && *period > 0) here = *quota / *period;
          }
        }
      } else {
        auto quota = read_number(dir + "/cpu.cfs_quota_us");
        auto period = read_number(dir + "/cpu.cfs_period_us");
        if (quota && period && *quota > 0 && *period > 0) here = *quota / *period;
      }
      if (here && (!limit || *here < *limit)) limit = here;
    }
    if (limit && *limit < cpus) {
      s.cpu_count = *limit;
      s.cpu_count_source = v_source(dirs_.cpu_version);
    }
  }

  // ---- CPU usage -----------------------------------------------------------
  // A cgroup counter when execd is in a non-root cgroup, else /proc/stat.
  MetricSource usage_source = MetricSource::none;
  double usage = 0, total = 0;
  if (!dirs_.cpuacct.empty() && !dirs_.cpuacct_root) {
    std::optional<double> seconds;
    if (dirs_.cpuacct_version == 2) {
      auto text = fs::read_small_file(dirs_.cpuacct + "/cpu.stat");
      if (text)
        if (auto us = keyed_value(*text, "usage_usec")) seconds = *us / 1e6;
    } else if (auto ns = read_number(dirs_.cpuacct + "/cpuacct.usage")) {
      seconds = *ns / 1e9;
    }
    if (seconds) {
      usage = *seconds;
      total = static_cast<double>(opt_.monotonic_ns()) / 1e9;
      usage_source = v_source(dirs_.cpuacct_version);
    }
  }
  if (usage_source == MetricSource::none && read_proc_stat(proc + "/stat", total, usage))
    usage_source = MetricSource::proc;
  s.cpu_used_source = usage_source;
  if (usage_source != MetricSource::none && have_prev_ && prev_source_ == usage_source) {
    double du = usage - prev_usage_, dt = total - prev_total_;
    double pct = 0;
    if (usage_source == MetricSource::proc) {
      // gopsutil calculateBusy: share of all host ticks.
      pct = du <= 0 ? 0 : dt <= 0 ? 100 : du / dt * 100;
    } else if (dt > 0) {
      pct = du / (dt * s.cpu_count) * 100;
    }
    s.cpu_used_pct = std::clamp(pct, 0.0, 100.0);
    s.cpu_used_valid = dt > 0 || usage_source == MetricSource::proc;
  }
  have_prev_ = usage_source != MetricSource::none;
  prev_source_ = usage_source;
  prev_usage_ = usage;
  prev_total_ = total;

  // ---- Memory --------------------------------------------------------------
  std::optional<std::string> meminfo = fs::read_small_file(proc + "/meminfo");
  double host_total = 0;  // bytes; 0 = unknown
  if (meminfo)
    if (auto t = keyed_value(*meminfo, "MemTotal"); t && *t > 0) host_total = *t;
  if (host_total > 0) {
    s.mem_total_mib = host_total / kMiB;
    s.mem_total_source = MetricSource::proc;
  }
  bool limited = false;
  if (!dirs_.memory.empty()) {
    std::optional<double> limit;
    for (const std::string& dir : ancestors(dirs_.memory, memory_mount_)) {
      std::optional<double> here;
      if (dirs_.memory_version == 2) {
        auto text = fs::read_small_file(dir + "/memory.max");
        if (text && trim(*text) != "max") here = parse_number(*text);
      } else {
        here = read_number(dir + "/memory.limit_in_bytes");
      }
      if (here && (!limit || *here < *limit)) limit = here;
    }
    if (dirs_.memory_version == 1) {
      if (auto stat = fs::read_small_file(dirs_.memory + "/memory.stat"))
        if (auto h = keyed_value(*stat, "hierarchical_memory_limit"); h && (!limit || *h < *limit)) limit = h;
    }
    if (limit && *limit > 0 && (host_total <= 0 || *limit < host_total)) {
      s.mem_total_mib = *limit / kMiB;
      s.mem_total_source = v_source(dirs_.memory_version);
      limited = true;
    }
  }
  bool used_done = false;
  if (!dirs_.memory.empty() && (!dirs_.memory_root || limited)) {
    std::optional<double> current =
        read_number(dirs_.memory + (dirs_.memory_version == 2 ? "/memory.current" : "/memory.usage_in_bytes"));
    if (current) {
      double inactive = 0;
      if (auto stat = fs::read_small_file(dirs_.memory + "/memory.stat")) {
        auto v = keyed_value(*stat, dirs_.memory_version == 2 ? "inactive_file" : "total_inactive_file");
        if (v) inactive = *v;
      }
      s.mem_used_mib = std::max(0.0, *current - inactive) / kMiB;
      s.mem_used_source = v_source(dirs_.memory_version);
      used_done = true;
    }
  }
  if (!used_done && meminfo && host_total > 0) {
    // gopsutil: Used = Total - Free - Buffers - (Cached + SReclaimable).
    double used = host_total - keyed_value(*meminfo, "MemFree").value_or(0) -
                  keyed_value(*meminfo, "Buffers").value_or(0) - keyed_value(*meminfo, "Cached").value_or(0) -
                  keyed_value(*meminfo, "SReclaimable").value_or(0);
    s.mem_used_mib = std::max(0.0, used) / kMiB;
    s.mem_used_source = MetricSource::proc;
  }
  return s;
}

}  // namespace execd::metrics
