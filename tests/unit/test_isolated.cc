// Unit tests for the /v1/isolated request decoding (protocol/isolated), an
// overlay's upper directory read as a layer (fs/layer), against real files
// in a mkdtemp directory (whiteouts are real 0/0 character devices, so
// those cases need root, as overlayfs does), and the seccomp filter of a
// session's processes (pty/hardening), in forked children.
#include <doctest/doctest.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <variant>

#include "fs/layer.h"
#include "fs/ops.h"
#include "protocol/isolated.h"
#include "pty/hardening.h"
#include "pty/namespaces.h"

using namespace execd;

namespace {
std::string create_error(const std::string& body) {
  auto r = protocol::decode_isolated_create(body);
  if (auto* e = std::get_if<protocol::DecodeError>(&r)) return e->message;
  return "";
}

struct Upper {
  std::string root;
  Upper() {
    char pattern[] = "/tmp/execd-layer-XXXXXX";
    root = mkdtemp(pattern);
  }
  ~Upper() { (void)fs::remove_tree(root); }
  void file(const std::string& rel, const std::string& body) {
    int fd = ::open((root + "/" + rel).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(fd >= 0);
    REQUIRE(::write(fd, body.data(), body.size()) == static_cast<ssize_t>(body.size()));
    ::close(fd);
  }
};

std::string gunzip(const std::string& in) {
  z_stream z{};
  REQUIRE(inflateInit2(&z, 16 + MAX_WBITS) == Z_OK);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  std::string out;
  char buf[65536];
  int rc;
  do {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    REQUIRE((rc == Z_OK || rc == Z_STREAM_END));
    out.append(buf, sizeof buf - z.avail_out);
  } while (rc != Z_STREAM_END);
  inflateEnd(&z);
  return out;
}
}  // namespace

TEST_CASE("isolated create: the legacy workspace and overlays") {
  auto r = protocol::decode_isolated_create(
      R"({"workspace":{"path":"/w","mode":"rw"},"overlays":[{"path":"/data","persist":false}],"share_net":false,)"
      R"("binds":[{"source":"/src","dest":"/dst","readonly":true}],"uid":1000,"uid_mode":"userns",)"
      R"("env_passthrough":{"mode":"allow","keys":["A"]},"idle_timeout_seconds":30,"unknown":1})");
  REQUIRE(std::holds_alternative<protocol::IsolatedCreateRequest>(r));
  auto& c = std::get<protocol::IsolatedCreateRequest>(r);
  REQUIRE(c.overlays.size() == 2);
  CHECK(c.overlays[0].path == "/w");
  CHECK(c.overlays[0].mode == "rw");
  CHECK(c.overlays[1].mode == "overlay");
  CHECK_FALSE(c.overlays[1].persistent());
  CHECK_FALSE(c.share_net);
  REQUIRE(c.binds.size() == 1);
  CHECK(c.binds[0].target() == "/dst");
  CHECK(c.binds[0].readonly);
  CHECK(c.uid == 1000u);
  CHECK_FALSE(c.gid.has_value());
  CHECK(c.uid_mode == "userns");
  CHECK(c.env_mode == "allow");
  CHECK(c.idle_timeout_seconds == 30);
  CHECK(c.profile == "strict");
}

TEST_CASE("isolated create: what is refused, and why") {
  CHECK(create_error("{}").find("workspace or overlays") != std::string::npos);
  CHECK(create_error(R"({"workspace":{"path":"rel"}})").find("absolute") != std::string::npos);
  CHECK(create_error(R"({"workspace":{"path":"/a/../b"}})") != "");
  CHECK(create_error(R"({"workspace":{"path":"/w","mode":"x"}})").find("mode") != std::string::npos);
  CHECK(create_error(R"({"workspace":{"path":"/w"},"uid_mode":"root"})").find("uid_mode") != std::string::npos);
  CHECK(create_error(R"({"workspace":{"path":"/w"},"uid":-1})").find("uid") != std::string::npos);
  CHECK(create_error(R"({"workspace":{"path":"/w"},"profile":"loose"})").find("profile") != std::string::npos);
  CHECK(create_error(R"({"overlays":[{"path":"/w"},{"path":"/w"}]})").find("twice") != std::string::npos);
  CHECK(create_error(R"({"overlays":[{"path":"/w","mode":"rw","persist":true}]})").find("persist") !=
        std::string::npos);
  CHECK(create_error(R"({"workspace":{"path":"/w"},"binds":[{"dest":"/x"}]})").find("source") != std::string::npos);
  CHECK(create_error(R"({"workspace":{"path":"/w"},"binds":[{"source":"/data/../../etc"}]})").find("clean") !=
        std::string::npos);
  CHECK(create_error("[1]") != "");
  CHECK(create_error("{") != "");
  CHECK(create_error(std::string("{\"workspace\":{\"path\":\"/w\\u0000\"}}")) != "");
}

TEST_CASE("isolated run requests") {
  auto r = protocol::decode_isolated_run(R"({"code":"echo","envs":{"A":"1"},"timeout_seconds":5,"background":true})");
  REQUIRE(std::holds_alternative<protocol::IsolatedRunRequest>(r));
  auto& run = std::get<protocol::IsolatedRunRequest>(r);
  CHECK(run.code == "echo");
  CHECK(run.envs.at("A") == "1");
  CHECK(run.timeout_seconds == 5);
  CHECK(run.background);
  CHECK(std::holds_alternative<protocol::DecodeError>(protocol::decode_isolated_run(R"({"code":""})")));
  CHECK(std::holds_alternative<protocol::DecodeError>(protocol::decode_isolated_run(R"({"code":5})")));
  CHECK(std::holds_alternative<protocol::DecodeError>(protocol::decode_isolated_run(R"({"code":"x","envs":[1]})")));
}

TEST_CASE("clean absolute paths") {
  CHECK(protocol::clean_absolute_path("/"));
  CHECK(protocol::clean_absolute_path("/a/b"));
  for (const char* bad : {"", "a", "/a/", "//a", "/a/./b", "/a/../b", "/.."}) CHECK_FALSE(protocol::clean_absolute_path(bad));
}

TEST_CASE("an upper directory as a diff and as an OCI layer") {
  Upper u;
  u.file("added.txt", "new\n");
  REQUIRE(mkdir((u.root + "/dir").c_str(), 0755) == 0);
  u.file("dir/inner.txt", "x");
  bool root = geteuid() == 0;
  if (root) {
    // overlayfs' whiteout: a 0/0 character device; an opaque directory: the xattr.
    REQUIRE(mknod((u.root + "/gone.txt").c_str(), S_IFCHR | 0, makedev(0, 0)) == 0);
  }
  fs::LayerDiff diff = fs::diff_layers({{"/ws", u.root}}, 100);
  REQUIRE_FALSE(diff.error.has_value());
  std::map<std::string, std::string> changes;
  for (const auto& c : diff.changes) changes[c.path] = c.change;
  CHECK(changes["/ws/added.txt"] != "");
  CHECK(changes["/ws/dir/inner.txt"] != "");
  if (root) CHECK(changes["/ws/gone.txt"] == "deleted");
  CHECK_FALSE(diff.truncated);
  CHECK(fs::diff_layers({{"/ws", u.root}}, 1).truncated);

  fs::LayerTarball tar({{"/ws", u.root}});
  std::string gz;
  while (tar.next(gz, 512)) {
  }
  REQUIRE_FALSE(tar.error().has_value());
  std::string plain = gunzip(gz);
  CHECK(plain.size() % 512 == 0);
  CHECK(plain.find("ws/added.txt") != std::string::npos);
  CHECK(plain.find("new\n") != std::string::npos);
  if (root) CHECK(plain.find("ws/.wh.gone.txt") != std::string::npos);
}

// --- the seccomp filter of a session's processes (pty/hardening) ---------------

namespace {
// Runs `body` in a forked child under the session filter (with
// no_new_privs, as a session's processes have it); its exit status.
template <typename F>
int under_session_filter(F body) {
  pid_t pid = fork();
  if (pid == 0) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || pty::install_session_filter()) _exit(100);
    _exit(body());
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int err_of(long r) { return r < 0 ? errno : 0; }

#if defined(__x86_64__)
// unshare(flags) through the 32-bit calling convention (int 0x80 from
// 64-bit code): the number is i386's, not x86_64's.
long unshare_int80(unsigned flags) {
  long r;
  // The kernel leaves ebx alone and zeroes r8-r11 on this path.
  asm volatile("int $0x80" : "=a"(r) : "a"(310L), "b"(flags) : "memory", "r8", "r9", "r10", "r11");
  return static_cast<int>(r);
}
#endif
}  // namespace

TEST_CASE("isolated session filter: no namespaces, no keyrings; threads and children still work") {
  pty::session_filter();  // built in the parent, as execd does
  CHECK(under_session_filter([] { return err_of(unshare(CLONE_NEWUSER)); }) == EPERM);
  CHECK(under_session_filter([] { return err_of(unshare(CLONE_NEWNS | CLONE_NEWNET)); }) == EPERM);
  CHECK(under_session_filter([] {
          return err_of(syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, nullptr, nullptr, nullptr, 0));
        }) == EPERM);
  // clone3's flags are out of a filter's reach: ENOSYS sends libc to clone.
  CHECK(under_session_filter([] { return err_of(syscall(SYS_clone3, nullptr, 0)); }) == ENOSYS);
  CHECK(under_session_filter([] { return err_of(syscall(SYS_keyctl, 0, -4, 1)); }) == EPERM);
  CHECK(under_session_filter([] { return err_of(syscall(SYS_add_key, "user", "x", "y", 1, -4)); }) == EPERM);
  // What ordinary work does: a child, a thread-like clone without new
  // namespaces, unshare of nothing new.
  CHECK(under_session_filter([] {
          pid_t c = fork();
          if (c == 0) _exit(7);
          int st = 0;
          waitpid(c, &st, 0);
          return WIFEXITED(st) && WEXITSTATUS(st) == 7 && unshare(CLONE_FILES) == 0 ? 0 : 1;
        }) == 0);
  // Without the filter the same calls go through (the control).
  CHECK(err_of(syscall(SYS_keyctl, 0, -4, 1)) == 0);
#if defined(__x86_64__)
  pid_t probe = fork();
  if (probe == 0) _exit(unshare_int80(CLONE_NEWUSER) == 0 ? 0 : 1);
  int st = 0;
  waitpid(probe, &st, 0);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {  // this kernel has the 32-bit convention
    CHECK(under_session_filter([] { return static_cast<int>(-unshare_int80(CLONE_NEWUSER)); }) == EPERM);
    CHECK(under_session_filter([] { return static_cast<int>(-unshare_int80(0)); }) == 0);
  }
#endif
}

TEST_CASE("isolated root view: the host mounts in tree order, one per path, the replaced paths left out") {
  std::vector<std::string> skip{"/proc", "/dev"};
  std::vector<std::string> mounts = pty::host_mount_points(skip);
  auto beneath = [](const std::string& p, const std::string& root) {
    return p.size() > root.size() && p.compare(0, root.size(), root) == 0 && p[root.size()] == '/';
  };
  std::set<std::string> seen;
  for (size_t i = 0; i < mounts.size(); ++i) {
    const std::string& m = mounts[i];
    CAPTURE(m);
    CHECK(m.size() > 1);
    CHECK(m[0] == '/');
    CHECK(seen.insert(m).second);
    for (const std::string& s : skip) CHECK_FALSE((m == s || beneath(m, s)));
    // What lies below a mount follows it at once, so a view that falls
    // back to a whole copy skips exactly its own.
    size_t j = i + 1;
    while (j < mounts.size() && beneath(mounts[j], m)) ++j;
    for (size_t k = j; k < mounts.size(); ++k) CHECK_FALSE(beneath(mounts[k], m));
  }
  // This process's /sys is a mount (and /sys/fs/cgroup, where there is one, follows it).
  struct stat sys {}, root {};
  if (stat("/sys", &sys) == 0 && stat("/", &root) == 0 && sys.st_dev != root.st_dev) CHECK(seen.count("/sys") == 1);
}
