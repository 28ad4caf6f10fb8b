// pty/cgroupfs: the mountinfo and /proc/self/cgroup parsers and the
// directory a cgroup path maps to.
#include <doctest/doctest.h>

#include "pty/cgroupfs.h"

using namespace execd::pty;

TEST_CASE("cgroupfs: cgroup mounts from mountinfo, escapes undone, other mounts skipped") {
  auto mounts = parse_cgroup_mounts(
      "31 23 0:28 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n"
      "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n"
      "40 31 0:37 /docker/0123 /mnt/my\\040cgroups rw - cgroup cgroup rw,xattr,name=systemd\n"
      "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
      "garbage line\n"
      "42 31 0:39 / /x rw - cgroup\n");
  REQUIRE(mounts.size() == 3);
  CHECK(mounts[0].mount_point == "/sys/fs/cgroup/cpu,cpuacct");
  CHECK_FALSE(mounts[0].v2);
  CHECK(mounts[0].options.count("cpu"));
  CHECK(mounts[0].options.count("cpuacct"));
  CHECK_FALSE(mounts[0].options.count("memory"));
  CHECK(mounts[1].root == "/docker/0123");
  CHECK(mounts[1].mount_point == "/mnt/my cgroups");
  CHECK(mounts[1].options.count("name=systemd"));
  CHECK(mounts[2].v2);
}

TEST_CASE("cgroupfs: /proc/self/cgroup lines") {
  auto own = parse_cgroup_memberships("12:memory:/sandbox/abc\n3:cpu,cpuacct:/sandbox/abc\n0::/\nbad\n");
  REQUIRE(own.size() == 3);
  CHECK(own[0].controllers == std::set<std::string>{"memory"});
  CHECK(own[1].controllers == std::set<std::string>{"cpu", "cpuacct"});
  CHECK_FALSE(own[1].unified);
  CHECK(own[2].unified);
  CHECK(own[2].controllers.empty());
  CHECK(own[2].path == "/");
}

TEST_CASE("cgroupfs: the directory of a cgroup path under a mount") {
  CgroupMount host{"/", "/sys/fs/cgroup/memory", false, {"memory"}};
  CHECK(cgroup_dir(host, "/") == "/sys/fs/cgroup/memory");
  CHECK(cgroup_dir(host, "/a/b") == "/sys/fs/cgroup/memory/a/b");
  // A container's mount shows its own cgroup as the root.
  CgroupMount ctr{"/docker/0123", "/sys/fs/cgroup/memory", false, {"memory"}};
  CHECK(cgroup_dir(ctr, "/docker/0123") == "/sys/fs/cgroup/memory");
  CHECK(cgroup_dir(ctr, "/docker/0123/sub") == "/sys/fs/cgroup/memory/sub");
  // Not under the root (only a prefix of a name, or elsewhere): relative to it.
  CHECK(cgroup_dir(ctr, "/docker/01234") == "/sys/fs/cgroup/memory/docker/01234");
  CHECK(cgroup_dir(ctr, "/sandbox") == "/sys/fs/cgroup/memory/sandbox");
  CHECK(cgroup_dir(ctr, "/") == "/sys/fs/cgroup/memory");
}
