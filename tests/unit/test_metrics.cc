// tests/unit/test_metrics.cc — pty/metrics against fake /proc and cgroup
// trees (v1, v2, hybrid, namespaced, none), and protocol/metrics_json.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <string>

#include "fs/atomic_file.h"
#include "fs/ops.h"
#include "protocol/metrics_json.h"
#include "execd/metrics/sampler.h"

using execd::metrics::MetricSource;
using execd::metrics::MetricsSample;
using execd::metrics::MetricsSampler;

namespace {

struct FakeRoot {
  std::string path;
  int64_t mono_ns = 1'000'000'000;
  int cpus = 4;
  FakeRoot() {
    char pattern[] = "/tmp/execd-metrics-test-XXXXXX";
    REQUIRE(mkdtemp(pattern) != nullptr);
    path = pattern;
  }
  ~FakeRoot() { (void)execd::fs::remove_tree(path); }

  void write(const std::string& rel, const std::string& content) {
    std::string full = path + "/" + rel;
    REQUIRE(execd::fs::make_directory_tree(full.substr(0, full.rfind('/'))).ok());
    std::ofstream(full, std::ios::binary) << content;
  }
  MetricsSampler sampler() {
    MetricsSampler::Options o;
    o.root = path;
    o.wall_ms = [] { return int64_t(1764712345678); };
    o.monotonic_ns = [this] { return mono_ns; };
    o.affinity_cpus = [this] { return cpus; };
    return MetricsSampler(o);
  }
  void proc(const std::string& stat_line, double total_kib = 8 * 1024 * 1024) {
    write("proc/stat", stat_line + "\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 1 2 3\n");
    // Used (gopsutil) = total - free - buffers - cached - sreclaimable
    char meminfo[512];
    snprintf(meminfo, sizeof meminfo,
             "MemTotal:       %.0f kB\nMemFree:         1048576 kB\nMemAvailable:    4194304 kB\n"
             "Buffers:          102400 kB\nCached:          1048576 kB\nSwapCached:            0 kB\n"
             "SReclaimable:     102400 kB\n",
             total_kib);
    write("proc/meminfo", meminfo);
  }
};

constexpr double kMiB = 1048576.0;

}  // namespace

TEST_CASE("metrics: cgroup v1 with limits (cpu,cpuacct co-mounted, hybrid unified mount)") {
  FakeRoot r;
  r.write("proc/self/cgroup",
          "12:memory:/sandbox/abc\n3:cpu,cpuacct:/sandbox/abc\n1:name=systemd:/sandbox/abc\n0::/\n");
  r.write("proc/self/mountinfo",
          "31 23 0:28 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n"
          "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n"
          "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
          "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n"
          "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n");
  const std::string cpu = "sys/fs/cgroup/cpu,cpuacct/sandbox/abc/";
  const std::string mem = "sys/fs/cgroup/memory/sandbox/abc/";
  r.write(cpu + "cpu.cfs_quota_us", "150000\n");
  r.write(cpu + "cpu.cfs_period_us", "100000\n");
  r.write(cpu + "cpuacct.usage", "5000000000\n");
  r.write("sys/fs/cgroup/cpu,cpuacct/sandbox/cpu.cfs_quota_us", "-1\n");
  r.write("sys/fs/cgroup/cpu,cpuacct/sandbox/cpu.cfs_period_us", "100000\n");
  r.write(mem + "memory.limit_in_bytes", "536870912\n");
  r.write(mem + "memory.usage_in_bytes", std::to_string(300 * 1048576) + "\n");
  r.write(mem + "memory.stat",
          "cache 1000\ninactive_file 5\nhierarchical_memory_limit 9223372036854771712\n"
          "total_inactive_file " + std::to_string(100 * 1048576) + "\n");
  r.proc("cpu  100 0 100 800 0 0 0 0 0 0");

  MetricsSampler sampler = r.sampler();
  CHECK(sampler.cgroups().cpu == r.path + "/sys/fs/cgroup/cpu,cpuacct/sandbox/abc");
  CHECK(sampler.cgroups().memory == r.path + "/sys/fs/cgroup/memory/sandbox/abc");
  CHECK(sampler.cgroups().memory_version == 1);
  CHECK_FALSE(sampler.cgroups().memory_root);

  MetricsSample first = sampler.sample();
  CHECK(first.cpu_count == 1.5);
  CHECK(first.cpu_count_source == MetricSource::cgroup_v1);
  CHECK(first.cpu_used_source == MetricSource::cgroup_v1);
  CHECK_FALSE(first.cpu_used_valid);
  CHECK(first.cpu_used_pct == 0);
  CHECK(first.mem_total_mib == 512);
  CHECK(first.mem_total_source == MetricSource::cgroup_v1);
  CHECK(first.mem_used_mib == 200);  // usage minus total_inactive_file
  CHECK(first.mem_used_source == MetricSource::cgroup_v1);
  CHECK(first.timestamp_ms == 1764712345678);

  // 2 s later the cgroup used 1.5 CPU-seconds: half of 1.5 CPUs.
  r.mono_ns += 2'000'000'000;
  r.write(cpu + "cpuacct.usage", "6500000000\n");
  MetricsSample second = sampler.sample();
  CHECK(second.cpu_used_valid);
  CHECK(second.cpu_used_pct == doctest::Approx(50.0));
  // Busier than the limit (a burst) is clamped to 100.
  r.mono_ns += 1'000'000'000;
  r.write(cpu + "cpuacct.usage", "9500000000\n");
  CHECK(sampler.sample().cpu_used_pct == 100);

  SUBCASE("a lower limit on an ancestor wins") {
    r.write("sys/fs/cgroup/cpu,cpuacct/sandbox/cpu.cfs_quota_us", "50000\n");
    r.write("sys/fs/cgroup/memory/sandbox/memory.limit_in_bytes", "268435456\n");
    MetricsSample s = r.sampler().sample();
    CHECK(s.cpu_count == 0.5);
    CHECK(s.mem_total_mib == 256);
  }
  SUBCASE("hierarchical_memory_limit counts") {
    r.write(mem + "memory.stat", "hierarchical_memory_limit 134217728\ntotal_inactive_file 0\n");
    CHECK(r.sampler().sample().mem_total_mib == 128);
  }
  SUBCASE("no limits: totals from /proc and the affinity mask, usage still from the cgroup") {
    r.write(cpu + "cpu.cfs_quota_us", "-1\n");
    r.write(mem + "memory.limit_in_bytes", "9223372036854771712\n");
    MetricsSample s = r.sampler().sample();
    CHECK(s.cpu_count == 4);
    CHECK(s.cpu_count_source == MetricSource::affinity);
    CHECK(s.cpu_used_source == MetricSource::cgroup_v1);
    CHECK(s.mem_total_mib == 8192);
    CHECK(s.mem_total_source == MetricSource::proc);
    CHECK(s.mem_used_mib == 200);
    CHECK(s.mem_used_source == MetricSource::cgroup_v1);
  }
  SUBCASE("a quota above the CPUs execd may use does not raise cpu_count") {
    r.write(cpu + "cpu.cfs_quota_us", "800000\n");
    CHECK(r.sampler().sample().cpu_count == 4);
  }
}

TEST_CASE("metrics: docker-style v1 mounts whose root is the container's cgroup") {
  FakeRoot r;
  r.write("proc/self/cgroup", "4:memory:/docker/0123\n3:cpuacct:/docker/0123\n2:cpu:/docker/0123\n");
  r.write("proc/self/mountinfo",
          "100 99 0:40 /docker/0123 /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n"
          "101 99 0:41 /docker/0123 /sys/fs/cgroup/cpu ro - cgroup cgroup rw,cpu\n"
          "102 99 0:42 /docker/0123 /sys/fs/cgroup/cpuacct ro - cgroup cgroup rw,cpuacct\n");
  r.write("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "200000");
  r.write("sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000");
  r.write("sys/fs/cgroup/cpuacct/cpuacct.usage", "1000");
  r.write("sys/fs/cgroup/memory/memory.limit_in_bytes", "1073741824");
  r.write("sys/fs/cgroup/memory/memory.usage_in_bytes", "1048576");
  r.write("sys/fs/cgroup/memory/memory.stat", "total_inactive_file 0\n");
  r.proc("cpu  1 0 1 8 0 0 0 0 0 0");
  MetricsSampler sampler = r.sampler();
  CHECK(sampler.cgroups().cpu == r.path + "/sys/fs/cgroup/cpu");
  CHECK(sampler.cgroups().cpuacct == r.path + "/sys/fs/cgroup/cpuacct");
  MetricsSample s = sampler.sample();
  CHECK(s.cpu_count == 2);
  CHECK(s.cpu_used_source == MetricSource::cgroup_v1);
  CHECK(s.mem_total_mib == 1024);
  CHECK(s.mem_used_mib == 1);
}

TEST_CASE("metrics: cgroup v2") {
  FakeRoot r;
  r.write("proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
  r.write("proc/self/mountinfo", "25 20 0:23 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
  const std::string dir = "sys/fs/cgroup/kubepods/pod1/ctr/";
  r.write(dir + "cgroup.controllers", "cpuset cpu io memory pids\n");
  r.write(dir + "cgroup.type", "domain\n");
  r.write(dir + "cpu.max", "200000 100000\n");
  r.write(dir + "cpu.stat", "usage_usec 4000000\nuser_usec 3000000\nsystem_usec 1000000\n");
  r.write(dir + "memory.max", "max\n");
  r.write(dir + "memory.current", std::to_string(64 * 1048576) + "\n");
  r.write(dir + "memory.stat", "anon 1\nfile 2\nactive_file 3\ninactive_file " + std::to_string(16 * 1048576) + "\n");
  r.write("sys/fs/cgroup/kubepods/pod1/memory.max", "1073741824\n");
  r.write("sys/fs/cgroup/kubepods/pod1/cpu.max", "max 100000\n");
  r.proc("cpu  1 0 1 8 0 0 0 0 0 0");

  MetricsSampler sampler = r.sampler();
  CHECK(sampler.cgroups().memory_version == 2);
  CHECK(sampler.cgroups().cpu_version == 2);
  MetricsSample s = sampler.sample();
  CHECK(s.cpu_count == 2);
  CHECK(s.cpu_count_source == MetricSource::cgroup_v2);
  CHECK(s.mem_total_mib == 1024);  // the pod's limit, one level up
  CHECK(s.mem_total_source == MetricSource::cgroup_v2);
  CHECK(s.mem_used_mib == 48);
  CHECK(s.mem_used_source == MetricSource::cgroup_v2);

  r.mono_ns += 1'000'000'000;
  r.write(dir + "cpu.stat", "usage_usec 4500000\n");
  s = sampler.sample();
  CHECK(s.cpu_used_source == MetricSource::cgroup_v2);
  CHECK(s.cpu_used_pct == doctest::Approx(25.0));  // 0.5 CPU-s in 1 s of 2 CPUs

  SUBCASE("controllers not enabled: usage from cpu.stat, limits from /proc") {
    r.write(dir + "cgroup.controllers", "\n");
    MetricsSample t = r.sampler().sample();
    CHECK(t.cpu_count == 4);
    CHECK(t.cpu_count_source == MetricSource::affinity);
    CHECK(t.cpu_used_source == MetricSource::cgroup_v2);
    CHECK(t.mem_total_source == MetricSource::proc);
    CHECK(t.mem_used_source == MetricSource::proc);
  }
}

TEST_CASE("metrics: the root cgroup (v2 namespace root without cgroup.type) reads /proc") {
  FakeRoot r;
  r.write("proc/self/cgroup", "0::/\n");
  r.write("proc/self/mountinfo", "25 20 0:23 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
  r.write("sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
  r.write("sys/fs/cgroup/cpu.stat", "usage_usec 123\n");
  // user nice system idle iowait irq softirq steal guest guest_nice
  r.proc("cpu  100 0 100 700 100 0 0 0 50 0");
  MetricsSampler sampler = r.sampler();
  CHECK(sampler.cgroups().cpuacct_root);
  MetricsSample s = sampler.sample();
  CHECK(s.cpu_count == 4);
  CHECK(s.cpu_used_source == MetricSource::proc);
  CHECK(s.mem_total_mib == 8192);
  CHECK(s.mem_total_source == MetricSource::proc);
  // 8 GiB - 1 GiB free - 100 MiB buffers - 1 GiB cached - 100 MiB reclaimable
  CHECK(s.mem_used_mib == 8192 - 1024 - 100 - 1024 - 100);
  CHECK(s.mem_used_source == MetricSource::proc);
  // +100 busy (50 user, 50 iowait: gopsutil counts iowait as busy), +100 idle, +40 guest (ignored).
  r.proc("cpu  150 0 100 800 150 0 0 0 90 0");
  s = sampler.sample();
  CHECK(s.cpu_used_valid);
  CHECK(s.cpu_used_pct == doctest::Approx(50.0));
  // No ticks at all: gopsutil says 0 (busy did not grow).
  s = sampler.sample();
  CHECK(s.cpu_used_pct == 0);
}

TEST_CASE("metrics: no cgroup information at all") {
  FakeRoot r;
  r.proc("cpu  1 0 1 8 0 0 0 0 0 0");
  MetricsSampler sampler = r.sampler();
  CHECK(sampler.cgroups().memory.empty());
  MetricsSample s = sampler.sample();
  CHECK(s.cpu_count == 4);
  CHECK(s.cpu_used_source == MetricSource::proc);
  CHECK(s.mem_used_source == MetricSource::proc);
  CHECK(std::string(execd::metrics::metric_source_name(s.mem_used_source)) == "proc");
}

TEST_CASE("metrics: the real machine answers something sane") {
  MetricsSampler sampler;
  MetricsSample a = sampler.sample();
  usleep(50 * 1000);
  MetricsSample b = sampler.sample();
  CHECK(b.cpu_count > 0);
  CHECK(b.mem_total_mib > 0);
  CHECK(b.mem_used_mib >= 0);
  CHECK(b.mem_used_mib <= b.mem_total_mib);
  CHECK(b.cpu_used_pct >= 0);
  CHECK(b.cpu_used_pct <= 100);
  CHECK(b.timestamp_ms >= a.timestamp_ms);
}

TEST_CASE("metrics_json: Go's float64 encoding") {
  using execd::protocol::append_go_float;
  auto f = [](double v) {
    std::string out;
    append_go_float(out, v);
    return out;
  };
  CHECK(f(0) == "0");
  CHECK(f(2) == "2");
  CHECK(f(-0.0) == "-0");
  CHECK(f(12.5) == "12.5");
  CHECK(f(0.1) == "0.1");
  CHECK(f(1.0 / 3) == "0.3333333333333333");
  CHECK(f(311.43359375) == "311.43359375");
  CHECK(f(123456789.125) == "123456789.125");
  CHECK(f(1e20) == "100000000000000000000");
  CHECK(f(1e21) == "1e+21");
  CHECK(f(0.000001) == "0.000001");
  CHECK(f(1e-7) == "1e-7");
  CHECK(f(1.5e-10) == "1.5e-10");
  CHECK(f(NAN) == "0");
  CHECK(f(INFINITY) == "0");

  execd::protocol::MetricsJson m{2, 12.5, 2048, 311.43359375, 1764712345678};
  CHECK(execd::protocol::metrics_json(m) ==
        R"({"cpu_count":2,"cpu_used_pct":12.5,"mem_total_mib":2048,"mem_used_mib":311.43359375,"timestamp":1764712345678})");
  CHECK(execd::protocol::metrics_error_json("failed to read \"x\"") == R"({"error":"failed to read \"x\""})");
}
