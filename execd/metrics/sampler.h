// execd/metrics/sampler — CPU and memory of the sandbox for GET /metrics and
// GET /metrics/watch, read from the process's own cgroup (v1 or v2), with
// /proc only where no cgroup limit applies.
//
// Upstream v1.0.19 (components/execd/pkg/web/controller/metric.go,
// pkg/web/model/metric.go) reports the HOST: cpu_count = GOMAXPROCS (with
// automaxprocs: floor(cgroup quota), at least 1, else the CPUs execd may run
// on), cpu_used_pct = gopsutil cpu.Percent(1s) over /proc/stat, mem_* from
// /proc/meminfo (used = MemTotal - MemFree - Buffers - Cached - SReclaimable).
// This sampler reports the sandbox instead:
//
//   cpu_count      cgroup CPU limit (v2 cpu.max "quota period", v1
//                  cpu.cfs_quota_us / cpu.cfs_period_us; the lowest over the
//                  cgroup and its ancestors up to the mount) when it is below
//                  the CPUs in execd's affinity mask; else that CPU count.
//                  A fraction is kept (1.5 CPUs = 1.5; Go would say 1).
//   cpu_used_pct   share of cpu_count used since the previous sample(),
//                  0..100 (100 = cpu_count CPUs fully busy): the cgroup's CPU
//                  time counter (v2 cpu.stat usage_usec, v1 cpuacct.usage ns)
//                  over wall time × cpu_count, when execd is in a non-root
//                  cgroup; in the root cgroup, /proc/stat as gopsutil
//                  v3.21.11 does (share of all host ticks that are not idle;
//                  iowait counts as busy). 0 on the first sample (no previous
//                  reading).
//   mem_total_mib  cgroup memory limit (v2 memory.max, v1 memory.limit_in_bytes
//                  and memory.stat hierarchical_memory_limit; lowest over the
//                  ancestors) when below MemTotal; else /proc/meminfo MemTotal.
//   mem_used_mib   in a non-root cgroup: the working set, as docker stats and
//                  kubectl top compute it: usage (v2 memory.current, v1
//                  memory.usage_in_bytes) minus inactive_file (v2 memory.stat
//                  inactive_file, v1 memory.stat total_inactive_file), at least
//                  0. In the root cgroup: /proc/meminfo, gopsutil's formula.
//   timestamp      Unix time in ms when the sample was read.
// MiB = bytes / 1048576 (floats, as upstream).
//
// "Root cgroup": v2, the cgroup directory has no cgroup.type file (only the
// root lacks it); v1, /proc/self/cgroup names "/" for that controller. Under
// a v1 cgroup namespace the namespace root also reads as "/" and falls back
// to /proc unless a limit applies.
//
// Own cgroup: /proc/self/cgroup gives each hierarchy's path;
// /proc/self/mountinfo gives where each hierarchy is mounted (v1 "cgroup"
// mounts by controller in the super options, v2 "cgroup2"). The directory is
// mountpoint + (path relative to the mount's root); if the path is not under
// the mount's root (namespaces), the mountpoint itself. A controller mounted
// as v1 is read from v1 (hybrid hosts), otherwise from v2.
//
// Blocking reads of small files: call sample() on the threadpool, never on
// the loop, from one thread at a time (it keeps the previous counters).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace execd::metrics {

enum class MetricSource {
  none,       // could not be read (the value is 0)
  cgroup_v1,  // from the cgroup v1 hierarchy
  cgroup_v2,  // from the cgroup v2 hierarchy
  proc,       // from /proc/stat or /proc/meminfo
  affinity,   // CPUs in the sched_getaffinity mask (sysconf if that fails)
};
// "none", "cgroup_v1", "cgroup_v2", "proc", "affinity".
const char* metric_source_name(MetricSource source);

struct MetricsSample {
  // The fields of upstream's Metrics JSON, same names and units.
  double cpu_count = 0;
  double cpu_used_pct = 0;
  double mem_total_mib = 0;
  double mem_used_mib = 0;
  int64_t timestamp_ms = 0;
  // The root filesystem (statvfs of `/` under the sampler's root), for
  // E2B's /metrics; 0 when it cannot be read.
  uint64_t disk_total_bytes = 0, disk_used_bytes = 0;

  // Where each number came from.
  MetricSource cpu_count_source = MetricSource::none;
  MetricSource cpu_used_source = MetricSource::none;
  MetricSource mem_total_source = MetricSource::none;
  MetricSource mem_used_source = MetricSource::none;
  bool cpu_used_valid = false;  // false on the first sample, or if a counter could not be read
};

// The cgroup directories found at construction ("" = not found), for logs.
struct CgroupDirs {
  std::string cpu;      // v1 cpu (quota) or v2 unified
  std::string cpuacct;  // v1 cpuacct (usage) or v2 unified
  std::string memory;   // v1 memory or v2 unified
  int cpu_version = 0, cpuacct_version = 0, memory_version = 0;  // 1, 2 or 0 (not found)
  bool cpu_root = true, cpuacct_root = true, memory_root = true;  // the hierarchy's root cgroup
};

class MetricsSampler {
 public:
  struct Options {
    // Prefix for every path read: "<root>/proc/self/cgroup",
    // "<root>/proc/self/mountinfo", "<root>/proc/stat", "<root>/proc/meminfo",
    // "<root><mountpoint>/...". "" = the real system. Tests point it at a fake tree.
    std::string root;
    std::function<int64_t()> wall_ms;        // default: CLOCK_REALTIME in ms
    std::function<int64_t()> monotonic_ns;   // default: CLOCK_MONOTONIC in ns
    std::function<int()> affinity_cpus;      // default: sched_getaffinity count
  };

  MetricsSampler();
  explicit MetricsSampler(Options options);

  // Reads everything once (blocking). cpu_used_pct compares with the previous
  // call; call it every 1-2 s in the background and serve the latest sample.
  MetricsSample sample();

  const CgroupDirs& cgroups() const { return dirs_; }

 private:
  Options opt_;
  CgroupDirs dirs_;
  std::string cpu_mount_, memory_mount_;  // mount points, for the ancestor walk
  bool have_prev_ = false;
  MetricSource prev_source_ = MetricSource::none;
  double prev_usage_ = 0;        // cgroup: CPU seconds; proc: busy ticks
  double prev_total_ = 0;        // cgroup: wall seconds; proc: total ticks
};

}  // namespace execd::metrics
