// fs/accounts: the files source a static execd reads instead of NSS, and
// that the build's own lookups agree with it on this machine's accounts.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "fs/accounts.h"

namespace files = execd::fs::files;

namespace {

// A file under /tmp with the given text, removed at the end of the test.
class TextFile {
 public:
  explicit TextFile(const std::string& text) {
    char pattern[] = "/tmp/execd-accounts-test-XXXXXX";
    int fd = mkstemp(pattern);
    REQUIRE(fd >= 0);
    path_ = pattern;
    REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
    close(fd);
  }
  ~TextFile() { unlink(path_.c_str()); }
  const char* path() const { return path_.c_str(); }

 private:
  std::string path_;
};

}  // namespace

TEST_CASE("accounts: users from a passwd file, by name and by uid") {
  // A line longer than the first buffer (4 KiB) must be read again, whole.
  std::string long_gecos(10000, 'g');
  TextFile passwd(
      "root:x:0:0:root:/root:/bin/bash\n"
      "# a comment\n"
      "not a passwd line\n"
      "agent:x:1000:1001:" + long_gecos + ":/home/agent:/bin/sh\n"
      "nohome:x:1002:1002:::/bin/sh\n");
  auto a = files::account(passwd.path(), "agent", {});
  REQUIRE(a);
  CHECK(a->uid == 1000);
  CHECK(a->gid == 1001);
  CHECK(a->name == "agent");
  CHECK(a->home == "/home/agent");
  auto by_uid = files::account(passwd.path(), {}, 1000);
  REQUIRE(by_uid);
  CHECK(by_uid->name == "agent");
  auto after_long = files::account(passwd.path(), {}, 1002);
  REQUIRE(after_long);
  CHECK(after_long->name == "nohome");
  CHECK(after_long->home.empty());
  CHECK_FALSE(files::account(passwd.path(), "no-such-user", {}));
  CHECK_FALSE(files::account(passwd.path(), {}, 4242));
  CHECK_FALSE(files::account(passwd.path(), "", {}));
  CHECK_FALSE(files::account("/nonexistent/passwd", "root", {}));
}

TEST_CASE("accounts: groups from a group file, and a user's groups") {
  std::string many_members;
  for (int i = 0; i < 2000; ++i) many_members += (i ? "," : "") + std::string("member") + std::to_string(i);
  TextFile group(
      "root:x:0:\n"
      "agent:x:1001:\n"
      "docker:x:999:someone,agent\n"
      "big:x:2000:" + many_members + ",agent\n"
      "again:x:1001:agent\n"
      "other:x:3000:agents,gent\n");
  auto g = files::group(group.path(), "docker", {});
  REQUIRE(g);
  CHECK(g->gid == 999);
  auto by_gid = files::group(group.path(), {}, 2000);
  REQUIRE(by_gid);
  CHECK(by_gid->name == "big");
  CHECK_FALSE(files::group(group.path(), "nogroup", {}));
  CHECK_FALSE(files::group(group.path(), {}, 4242));
  // The primary gid first and once, then each group naming the user exactly.
  auto groups = files::groups_of(group.path(), "agent", 1001);
  CHECK(groups == std::vector<gid_t>{1001, 999, 2000});
  CHECK(files::groups_of(group.path(), "nobody-here", 5) == std::vector<gid_t>{5});
  CHECK(files::groups_of("/nonexistent/group", "agent", 7) == std::vector<gid_t>{7});
}

TEST_CASE("accounts: this build's lookups agree with /etc/passwd and /etc/group for root") {
  auto root = execd::fs::account_named("root");
  auto from_file = files::account("/etc/passwd", "root", {});
  REQUIRE(from_file);
  REQUIRE(root);
  CHECK(root->uid == from_file->uid);
  CHECK(root->home == from_file->home);
  auto by_uid = execd::fs::account_with_uid(0);
  REQUIRE(by_uid);
  CHECK(by_uid->name == "root");
  auto g = execd::fs::group_with_gid(0);
  REQUIRE(g);
  CHECK(g->name == files::group("/etc/group", {}, 0)->name);
  CHECK(execd::fs::groups_of("root", 0).front() == 0);
}
