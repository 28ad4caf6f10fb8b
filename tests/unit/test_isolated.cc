// Unit tests for the /v1/isolated request decoding (protocol/isolated) and
// an overlay's upper directory read as a layer (fs/layer), against real
// files in a mkdtemp directory (whiteouts are real 0/0 character devices,
// so those cases need root, as overlayfs does).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <map>
#include <string>
#include <variant>

#include "fs/layer.h"
#include "fs/ops.h"
#include "protocol/isolated.h"

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
