// tests/unit/test_fs_ops.cc — fs/ operations against real files in a mkdtemp
// directory: paths, FileInfo, info/delete/permissions/move/search/replace/
// list/mkdir/rm -rf and the atomic writer.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "fs/atomic_file.h"
#include "fs/error.h"
#include "fs/file_info.h"
#include "fs/ops.h"
#include "fs/paths.h"
#include "fs/permissions.h"
#include "fs/xattrs.h"

using namespace execd::fs;

namespace {

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/execd-fs-test-XXXXXX";
    char* made = mkdtemp(pattern);
    REQUIRE(made != nullptr);
    path_ = made;
  }
  ~TempDir() {
    // Restore permissions a test may have removed, then rm -rf.
    std::string command = "chmod -R u+rwx '" + path_ + "' 2>/dev/null";
    (void)std::system(command.c_str());
    (void)remove_tree(path_);
  }
  const std::string& path() const { return path_; }
  std::string operator/(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

void write_file(const std::string& path, std::string_view content, mode_t mode = 0644) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()));
  close(fd);
  REQUIRE(chmod(path.c_str(), mode) == 0);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

bool exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

ino_t inode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(lstat(path.c_str(), &st) == 0);
  return st.st_ino;
}

void make_dir(const std::string& path, mode_t mode = 0755) { REQUIRE(mkdir(path.c_str(), mode) == 0); }
void make_symlink(const std::string& target, const std::string& link) {
  REQUIRE(symlink(target.c_str(), link.c_str()) == 0);
}

mode_t current_umask() {
  // Only for tests (single-threaded here): set and restore.
  mode_t mask = umask(022);
  umask(mask);
  return mask;
}

EnvLookup map_env(std::map<std::string, std::string> values) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(values));
  return [shared](std::string_view name) -> const char* {
    auto it = shared->find(std::string(name));
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

const EnvLookup kEnv = process_env_lookup();

std::vector<std::string> paths_of(const std::vector<FileInfo>& infos) {
  std::vector<std::string> out;
  for (const auto& info : infos) out.push_back(info.path);
  return out;
}

std::string naive_replace(std::string text, const std::string& from, const std::string& to, uint64_t& count) {
  count = 0;
  size_t pos = 0;
  while ((pos = text.find(from, pos)) != std::string::npos) {
    text.replace(pos, from.size(), to);
    pos += to.size();
    ++count;
  }
  return text;
}

}  // namespace

// ---- errors -----------------------------------------------------------------

TEST_CASE("fs errors: errno classification") {
  CHECK(errno_error(ENOENT, "x").kind == ErrorKind::not_found);
  CHECK(errno_error(EACCES, "x").kind == ErrorKind::forbidden);
  CHECK(errno_error(EPERM, "x").kind == ErrorKind::forbidden);
  CHECK(errno_error(ENOSPC, "x").kind == ErrorKind::no_space);
  CHECK(errno_error(EDQUOT, "x").kind == ErrorKind::no_space);
  CHECK(errno_error(EIO, "x").kind == ErrorKind::internal);
  CHECK(errno_error(ENOENT, "lstat /x").message == "lstat /x: No such file or directory");
}

// ---- paths ------------------------------------------------------------------

TEST_CASE("paths: expand variables and ~") {
  auto env = map_env({{"HOME", "/home/u"}, {"DIR", "/data"}, {"X", "x"}});
  CHECK(expand_path("$DIR/a", env).value() == "/data/a");
  CHECK(expand_path("${DIR}/${X}y", env).value() == "/data/xy");
  CHECK(expand_path("~", env).value() == "/home/u");
  CHECK(expand_path("~/f.txt", env).value() == "/home/u/f.txt");
  CHECK(expand_path("~user/f", env).value() == "~user/f");
  CHECK(expand_path("a~/b", env).value() == "a~/b");
  CHECK(expand_path("relative/p", env).value() == "relative/p");

  auto undefined = expand_path("$ZED/$ALPHA/$ZED", env);
  REQUIRE_FALSE(undefined.ok());
  CHECK(undefined.error().kind == ErrorKind::bad_request);
  CHECK(undefined.error().message == "path references undefined environment variables: ALPHA,ZED");

  CHECK(expand_path("", env).error().kind == ErrorKind::bad_request);
  CHECK(expand_path(std::string_view("a\0b", 3), env).error().kind == ErrorKind::bad_request);
}

TEST_CASE("paths: ExpandAbs and clean") {
  char cwd[4096];
  REQUIRE(getcwd(cwd, sizeof cwd) != nullptr);
  auto env = map_env({{"HOME", "/home/u"}});
  CHECK(expand_path_abs("a/../b/./c/", env).value() == clean_path(std::string(cwd) + "/b/c"));
  CHECK(expand_path_abs("/x//y/../z", env).value() == "/x/z");
  CHECK(expand_path_abs("~/../v", env).value() == "/home/v");

  CHECK(clean_path("") == ".");
  CHECK(clean_path("/") == "/");
  CHECK(clean_path("/../a") == "/a");
  CHECK(clean_path("a//b/./c/..") == "a/b");
  CHECK(clean_path("../../a") == "../../a");
  CHECK(clean_path("a/..") == ".");
  CHECK(parent_path("/a/b") == "/a");
  CHECK(parent_path("/a") == "/");
  CHECK(parent_path("a") == ".");
  CHECK(base_name("/a/b") == "b");
  CHECK(join_path("/", "b") == "/b");
}

// ---- FileInfo ---------------------------------------------------------------

TEST_CASE("file info: modes, times, types, JSON") {
  CHECK(mode_to_octal_digits(0755) == 755);
  CHECK(mode_to_octal_digits(0600) == 600);
  CHECK(mode_to_octal_digits(0) == 0);
  CHECK(mode_to_octal_digits(04755) == 4755);

  const char* old_tz = std::getenv("TZ");
  std::string saved = old_tz ? old_tz : "";
  setenv("TZ", "UTC", 1);
  tzset();
  CHECK(format_rfc3339_nano(timespec{1766394485, 123456789}) == "2025-12-22T09:08:05.123456789Z");
  CHECK(format_rfc3339_nano(timespec{1766394485, 120000000}) == "2025-12-22T09:08:05.12Z");
  CHECK(format_rfc3339_nano(timespec{1766394485, 0}) == "2025-12-22T09:08:05Z");
  setenv("TZ", "XST-8", 1);  // POSIX TZ: UTC+8
  tzset();
  CHECK(format_rfc3339_nano(timespec{1766394485, 5}) == "2025-12-22T17:08:05.000000005+08:00");
  setenv("TZ", "YST+3:30", 1);
  tzset();
  CHECK(format_rfc3339_nano(timespec{1766394485, 0}) == "2025-12-22T05:38:05-03:30");
  if (old_tz) setenv("TZ", saved.c_str(), 1);
  else unsetenv("TZ");
  tzset();

  TempDir dir;
  write_file(dir / "f.txt", "hello", 0640);
  make_symlink("f.txt", dir / "link");
  auto info = stat_file_info(dir / "f.txt");
  REQUIRE(info.ok());
  CHECK(info.value().type == FileType::file);
  CHECK(info.value().size == 5);
  CHECK(info.value().mode == 0640);
  CHECK_FALSE(info.value().owner.empty());
  CHECK_FALSE(info.value().group.empty());

  auto link = stat_file_info(dir / "link");
  REQUIRE(link.ok());
  CHECK(link.value().type == FileType::symlink);
  CHECK(link.value().size == 5);  // strlen("f.txt")

  auto json = to_json(info.value());
  CHECK(json["path"] == dir / "f.txt");
  CHECK(json["type"] == "file");
  CHECK(json["size"] == 5);
  CHECK(json["mode"] == 640);
  CHECK(json["modified_at"].is_string());
  CHECK(json["created_at"].is_string());
  CHECK(json["owner"].is_string());
  CHECK(json["group"].is_string());
  CHECK(json.size() == 8);

  auto dir_info = stat_file_info(dir.path());
  CHECK(dir_info.value().type == FileType::directory);
  CHECK(stat_file_info(dir / "missing").error().kind == ErrorKind::not_found);

  CHECK(user_name_for(0) == "root");
  CHECK(uid_for_name("root") == uid_t{0});
  CHECK(uid_for_name("12345") == uid_t{12345});  // numeric fallback
  CHECK_FALSE(uid_for_name("no-such-user-execd"));
  CHECK_FALSE(gid_for_name("no-such-group-execd"));
  CHECK(user_name_for(54321) == "54321");
}

// ---- info ---------------------------------------------------------------------

TEST_CASE("get_file_info keys by the path as given") {
  TempDir dir;
  write_file(dir / "a.txt", "abc");
  auto env = map_env({{"D", dir.path()}, {"HOME", dir.path()}});
  auto infos = get_file_info({"$D/a.txt", "~/a.txt"}, env);
  REQUIRE(infos.ok());
  auto json = file_info_map_json(infos.value());
  CHECK(json.size() == 2);
  CHECK(json["$D/a.txt"]["path"] == dir / "a.txt");
  CHECK(json["~/a.txt"]["size"] == 3);
  CHECK(get_file_info({dir / "a.txt", dir / "nope"}, kEnv).error().kind == ErrorKind::not_found);
  CHECK(file_info_map_json(get_file_info({}, kEnv).value()) == nlohmann::json::object());
}

// ---- delete -----------------------------------------------------------------

TEST_CASE("delete_files") {
  TempDir dir;
  write_file(dir / "a", "1");
  make_dir(dir / "d");
  write_file(dir / "d/inner", "2");
  make_symlink(dir / "d", dir / "dirlink");
  make_symlink(dir / "nowhere", dir / "dangling");

  SUBCASE("files, missing paths, dangling and directory symlinks") {
    REQUIRE(delete_files({dir / "a", dir / "missing", dir / "dangling", dir / "dirlink"}, kEnv).ok());
    CHECK_FALSE(exists(dir / "a"));
    CHECK_FALSE(exists(dir / "dangling"));
    CHECK_FALSE(exists(dir / "dirlink"));
    CHECK(exists(dir / "d/inner"));  // the link's target is untouched
  }
  SUBCASE("a directory rejects the whole request") {
    auto result = delete_files({dir / "a", dir / "d"}, kEnv);
    REQUIRE_FALSE(result.ok());
    CHECK(result.error().kind == ErrorKind::conflict);
    CHECK(exists(dir / "a"));
  }
}

// ---- permissions ------------------------------------------------------------

TEST_CASE("set_permissions") {
  TempDir dir;
  write_file(dir / "a", "1", 0644);
  write_file(dir / "b", "2", 0644);

  SUBCASE("modes including 0 and special bits; absent mode untouched") {
    PermissionSpec setuid{std::nullopt, std::nullopt, mode_t{04755}};
    PermissionSpec zero{std::nullopt, std::nullopt, mode_t{0}};
    REQUIRE(set_permissions({{dir / "a", setuid}, {dir / "b", zero}}, kEnv).ok());
    CHECK(mode_of(dir / "a") == 04755);
    CHECK(mode_of(dir / "b") == 0);
    REQUIRE(set_permissions({{dir / "b", PermissionSpec{}}}, kEnv).ok());
    CHECK(mode_of(dir / "b") == 0);
  }
  SUBCASE("unknown owner rejects before anything changes") {
    PermissionSpec ok{std::nullopt, std::nullopt, mode_t{0600}};
    PermissionSpec bad{std::string("no-such-user-execd"), std::nullopt, mode_t{0600}};
    auto result = set_permissions({{dir / "a", ok}, {dir / "b", bad}}, kEnv);
    REQUIRE_FALSE(result.ok());
    CHECK(result.error().kind == ErrorKind::bad_request);
    CHECK(mode_of(dir / "a") == 0644);
    PermissionSpec bad_group{std::nullopt, std::string("no-such-group-execd"), std::nullopt};
    CHECK(set_permissions({{dir / "a", bad_group}}, kEnv).error().kind == ErrorKind::bad_request);
  }
  SUBCASE("missing file rejects before anything changes") {
    PermissionSpec ok{std::nullopt, std::nullopt, mode_t{0600}};
    auto result = set_permissions({{dir / "a", ok}, {dir / "missing", ok}}, kEnv);
    REQUIRE_FALSE(result.ok());
    CHECK(result.error().kind == ErrorKind::not_found);
    CHECK(mode_of(dir / "a") == 0644);
  }
  SUBCASE("chown by name and by number (root only)") {
    if (geteuid() != 0) return;
    auto nobody = uid_for_name("nobody");
    if (!nobody) return;
    PermissionSpec spec{std::string("nobody"), std::string("0"), std::nullopt};
    REQUIRE(set_permissions({{dir / "a", spec}}, kEnv).ok());
    struct stat st {};
    REQUIRE(stat((dir / "a").c_str(), &st) == 0);
    CHECK(st.st_uid == *nobody);
    CHECK(st.st_gid == 0);
    CHECK(mode_of(dir / "a") == 0644);  // untouched
    // Group only: owner stays.
    PermissionSpec group_only{std::nullopt, std::string("12345"), std::nullopt};
    REQUIRE(set_permissions({{dir / "a", group_only}}, kEnv).ok());
    REQUIRE(stat((dir / "a").c_str(), &st) == 0);
    CHECK(st.st_uid == *nobody);
    CHECK(st.st_gid == 12345);
  }
}

// ---- move -------------------------------------------------------------------

TEST_CASE("move_files") {
  TempDir dir;
  write_file(dir / "a", "A");
  write_file(dir / "b", "B");
  make_dir(dir / "d");
  write_file(dir / "d/x", "X");
  make_symlink(dir / "nowhere", dir / "dangling");

  SUBCASE("file, directory and dangling symlink; dest parents created") {
    REQUIRE(move_files({{dir / "a", dir / "new/deeper/a2"},
                        {dir / "d", dir / "d2"},
                        {dir / "dangling", dir / "dangling2"}},
                       kEnv)
                .ok());
    CHECK(read_file(dir / "new/deeper/a2") == "A");
    CHECK(read_file(dir / "d2/x") == "X");
    CHECK_FALSE(exists(dir / "a"));
    CHECK_FALSE(exists(dir / "d"));
    CHECK(exists(dir / "dangling2"));
  }
  SUBCASE("chained moves validate against the simulated state") {
    REQUIRE(move_files({{dir / "a", dir / "c"}, {dir / "c", dir / "e"}, {dir / "b", dir / "a"}}, kEnv).ok());
    CHECK(read_file(dir / "e") == "A");
    CHECK(read_file(dir / "a") == "B");
    CHECK_FALSE(exists(dir / "b"));
    CHECK_FALSE(exists(dir / "c"));
  }
  SUBCASE("existing destination rejects the whole request") {
    auto result = move_files({{dir / "d/x", dir / "x2"}, {dir / "a", dir / "b"}}, kEnv);
    REQUIRE_FALSE(result.ok());
    CHECK(result.error().kind == ErrorKind::conflict);
    CHECK(exists(dir / "d/x"));
    CHECK_FALSE(exists(dir / "x2"));
    CHECK(read_file(dir / "b") == "B");
  }
  SUBCASE("missing source") {
    auto result = move_files({{dir / "a", dir / "a2"}, {dir / "missing", dir / "m2"}}, kEnv);
    REQUIRE_FALSE(result.ok());
    CHECK(result.error().kind == ErrorKind::not_found);
    CHECK(exists(dir / "a"));
  }
  SUBCASE("empty source path is a bad request, not a move of the cwd") {
    CHECK(move_files({{"", dir / "x"}}, kEnv).error().kind == ErrorKind::bad_request);
  }

}

// ---- search -----------------------------------------------------------------

TEST_CASE("search_files") {
  TempDir dir;
  write_file(dir / "alpha.txt", "");
  write_file(dir / "beta.md", "");
  write_file(dir / ".hidden.txt", "");
  make_dir(dir / "sub");
  write_file(dir / "sub/gamma.txt", "");
  make_dir(dir / "sub/deep");
  write_file(dir / "sub/deep/delta.txt", "");
  make_dir(dir / "outside");
  write_file(dir / "outside/o.txt", "");
  make_dir(dir / "root");
  write_file(dir / "root/r.txt", "");
  make_symlink(dir / "outside", dir / "root/link-to-dir");
  make_symlink(dir / "nowhere.txt", dir / "root/dangling.txt");
  make_dir(dir / "root/Z");
  write_file(dir / "root/Z/z.txt", "");
  const std::string root = dir / "root";

  SUBCASE("basename pattern is recursive, lexical, no symlink following") {
    auto result = search_files(root, "*.txt", 0, kEnv);
    REQUIRE(result.ok());
    CHECK(paths_of(result.value().files) ==
          std::vector<std::string>{root + "/Z/z.txt", root + "/dangling.txt", root + "/r.txt"});
    CHECK(result.value().files[1].type == FileType::symlink);
    CHECK_FALSE(result.value().truncated);
  }
  SUBCASE("default pattern returns every non-directory") {
    auto result = search_files(root, "", 0, kEnv);
    REQUIRE(result.ok());
    CHECK(paths_of(result.value().files) ==
          std::vector<std::string>{root + "/Z/z.txt", root + "/dangling.txt", root + "/link-to-dir",
                                   root + "/r.txt"});
  }
  SUBCASE("hidden files and the Go test case") {
    auto result = search_files(dir.path(), "*.txt", 0, kEnv);
    REQUIRE(result.ok());
    auto paths = paths_of(result.value().files);
    CHECK(std::find(paths.begin(), paths.end(), dir / ".hidden.txt") != paths.end());
    CHECK(std::find(paths.begin(), paths.end(), dir / "sub/deep/delta.txt") != paths.end());
    auto alpha = search_files(dir.path(), "alpha*", 0, kEnv);
    REQUIRE(alpha.value().files.size() == 1);
    CHECK(alpha.value().files[0].path == dir / "alpha.txt");
    CHECK(alpha.value().files[0].type == FileType::file);
  }
  SUBCASE("patterns with '/' match the relative path") {
    auto result = search_files(dir.path(), "sub/*.txt", 0, kEnv);
    REQUIRE(result.ok());
    CHECK(paths_of(result.value().files) == std::vector<std::string>{dir / "sub/gamma.txt"});
    auto deep = search_files(dir.path(), "sub/**/*.txt", 0, kEnv);
    CHECK(paths_of(deep.value().files) ==
          std::vector<std::string>{dir / "sub/deep/delta.txt", dir / "sub/gamma.txt"});
    auto any = search_files(dir.path(), "**/delta.txt", 0, kEnv);
    CHECK(paths_of(any.value().files) == std::vector<std::string>{dir / "sub/deep/delta.txt"});
  }
  SUBCASE("result cap") {
    auto result = search_files(root, "**", 2, kEnv);
    REQUIRE(result.ok());
    CHECK(result.value().files.size() == 2);
    CHECK(result.value().truncated);
    auto exact = search_files(root, "*.txt", 3, kEnv);
    CHECK(exact.value().files.size() == 3);
    CHECK_FALSE(exact.value().truncated);
  }
  SUBCASE("root is a file") {
    auto hit = search_files(dir / "alpha.txt", "*.txt", 0, kEnv);
    CHECK(paths_of(hit.value().files) == std::vector<std::string>{dir / "alpha.txt"});
    CHECK(search_files(dir / "alpha.txt", "*.md", 0, kEnv).value().files.empty());
  }
  SUBCASE("errors") {
    CHECK(search_files(dir / "missing", "*", 0, kEnv).error().kind == ErrorKind::not_found);
    CHECK(search_files(root, "[abc", 0, kEnv).error().kind == ErrorKind::bad_request);
  }
  SUBCASE("a walk in slices yields the same matches in the same order") {
    auto whole = search_files(dir.path(), "", 0, kEnv);
    REQUIRE(whole.ok());
    auto walk = SearchWalk::start(dir.path(), "", kEnv);
    REQUIRE(walk.ok());
    std::vector<FileInfo> sliced;
    int calls = 0;
    for (bool more = true; more; ++calls) {
      size_t before = sliced.size();
      more = walk.value()->next(sliced, 1, 2);
      CHECK(sliced.size() - before <= 1);
    }
    CHECK(paths_of(sliced) == paths_of(whole.value().files));
    CHECK(calls > static_cast<int>(sliced.size()));  // entries bounded each call, not only matches
  }
  SUBCASE("a cancelled walk stops and appends nothing more") {
    auto walk = SearchWalk::start(dir.path(), "", kEnv);
    REQUIRE(walk.ok());
    std::atomic<bool> cancelled{true};
    std::vector<FileInfo> out;
    CHECK_FALSE(walk.value()->next(out, 100, 100, &cancelled));
    CHECK(out.empty());
  }
  SUBCASE("unreadable subdirectory is skipped (non-root only)") {
    if (geteuid() == 0) return;
    REQUIRE(chmod((dir / "sub/deep").c_str(), 0) == 0);
    auto result = search_files(dir.path(), "*.txt", 0, kEnv);
    REQUIRE(result.ok());
    auto paths = paths_of(result.value().files);
    CHECK(std::find(paths.begin(), paths.end(), dir / "sub/gamma.txt") != paths.end());
  }
}

// ---- replace ----------------------------------------------------------------

TEST_CASE("stream_replace: matches straddling chunk boundaries") {
  TempDir dir;
  const std::string text = "abcabcaXbcabcabcab" + std::string("\0abc\0", 5) + "aabcabc";
  write_file(dir / "t", text);
  for (const std::string& from : {std::string("abc"), std::string("a"), std::string("cab"),
                                  std::string("abcabcabcab"), std::string("zz"), text}) {
    for (const std::string& to : {std::string(""), std::string("XYZW"), std::string("abc")}) {
      uint64_t expected_count = 0;
      std::string expected = naive_replace(text, from, to, expected_count);
      for (size_t chunk = 1; chunk <= text.size() + 1; ++chunk) {
        int fd = open((dir / "t").c_str(), O_RDONLY | O_CLOEXEC);
        REQUIRE(fd >= 0);
        std::string out;
        auto count = stream_replace(fd, from, to,
                                    [&out](std::string_view bytes) {
                                      out.append(bytes);
                                      return Status::success();
                                    },
                                    chunk);
        close(fd);
        INFO("from=" << from << " to=" << to << " chunk=" << chunk);
        REQUIRE(count.ok());
        CHECK(count.value() == expected_count);
        CHECK(out == expected);
      }
    }
  }
}

TEST_CASE("replace_in_files") {
  TempDir dir;
  write_file(dir / "a.txt", "hello world, world!", 0640);
  write_file(dir / "b.txt", "nothing here", 0600);
  write_file(dir / "target.txt", "one two two");
  make_symlink("target.txt", dir / "link.txt");

  SUBCASE("counts, mode preserved, unchanged files not rewritten") {
    ino_t unchanged_inode = inode_of(dir / "b.txt");
    auto result = replace_in_files({{dir / "a.txt", "world", "universe"}, {dir / "b.txt", "zzz", "y"}}, kEnv);
    REQUIRE(result.ok());
    REQUIRE(result.value().size() == 2);
    CHECK(result.value()[0].replaced_count == 2);
    CHECK(result.value()[1].replaced_count == 0);
    CHECK(read_file(dir / "a.txt") == "hello universe, universe!");
    CHECK(mode_of(dir / "a.txt") == 0640);
    CHECK(inode_of(dir / "b.txt") == unchanged_inode);
    auto json = replace_outcomes_json(result.value());
    CHECK(json[dir / "a.txt"]["replacedCount"] == 2);
    CHECK(json[dir / "b.txt"]["replacedCount"] == 0);
    // No temp files left behind.
    auto leftovers = search_files(dir.path(), "*.tmp", 0, kEnv);
    CHECK(leftovers.value().files.empty());
  }
  SUBCASE("a symlink is edited through, the link stays") {
    auto result = replace_in_files({{dir / "link.txt", "two", "2"}}, kEnv);
    REQUIRE(result.ok());
    CHECK(result.value()[0].replaced_count == 2);
    CHECK(read_file(dir / "target.txt") == "one 2 2");
    CHECK(stat_file_info(dir / "link.txt").value().type == FileType::symlink);
  }
  SUBCASE("a rejected entry changes nothing") {
    auto missing = replace_in_files({{dir / "a.txt", "world", "x"}, {dir / "nope.txt", "a", "b"}}, kEnv);
    REQUIRE_FALSE(missing.ok());
    CHECK(missing.error().kind == ErrorKind::not_found);
    auto empty_old = replace_in_files({{dir / "a.txt", "world", "x"}, {dir / "b.txt", "", "b"}}, kEnv);
    REQUIRE_FALSE(empty_old.ok());
    CHECK(empty_old.error().kind == ErrorKind::bad_request);
    auto directory = replace_in_files({{dir / "a.txt", "world", "x"}, {dir.path(), "a", "b"}}, kEnv);
    CHECK(directory.error().kind == ErrorKind::bad_request);
    auto twice = replace_in_files({{dir / "target.txt", "one", "1"}, {dir / "link.txt", "two", "2"}}, kEnv);
    CHECK(twice.error().kind == ErrorKind::bad_request);
    CHECK(read_file(dir / "a.txt") == "hello world, world!");
    CHECK(read_file(dir / "target.txt") == "one two two");
  }
  SUBCASE("~ expansion (Go test)") {
    auto env = map_env({{"HOME", dir.path()}});
    auto result = replace_in_files({{"~/a.txt", "hello", "hi"}}, env);
    REQUIRE(result.ok());
    CHECK(result.value()[0].path == "~/a.txt");
    CHECK(read_file(dir / "a.txt") == "hi world, world!");
  }

}

// ---- list -------------------------------------------------------------------

TEST_CASE("list_directory") {
  TempDir dir;
  const std::string root = dir / "root";
  make_dir(root);
  write_file(root + "/b.txt", "");
  write_file(root + "/B.txt", "");
  make_dir(root + "/a");
  write_file(root + "/a/child.txt", "");
  make_dir(root + "/a/sub");
  write_file(root + "/a/sub/grandchild.txt", "");
  make_dir(dir / "real");
  write_file(dir / "real/inside.txt", "");
  make_symlink(dir / "real", root + "/link");
  make_symlink(root, dir / "root-link");

  SUBCASE("depth 1 (default)") {
    auto depth = parse_list_depth(std::nullopt);
    REQUIRE(depth.value() == 1);
    auto result = list_directory(root, depth.value(), kEnv);
    REQUIRE(result.ok());
    CHECK(paths_of(result.value()) ==
          std::vector<std::string>{root + "/B.txt", root + "/a", root + "/b.txt", root + "/link"});
    CHECK(result.value()[1].type == FileType::directory);
    CHECK(result.value()[3].type == FileType::symlink);
  }
  SUBCASE("depth 2 is pre-order and never enters symlinks") {
    auto result = list_directory(root, 2, kEnv);
    REQUIRE(result.ok());
    CHECK(paths_of(result.value()) ==
          std::vector<std::string>{root + "/B.txt", root + "/a", root + "/a/child.txt", root + "/a/sub",
                                   root + "/b.txt", root + "/link"});
    auto deep = list_directory(root, 10, kEnv);
    CHECK(deep.value().size() == 7);
  }
  SUBCASE("depth 0 and errors") {
    CHECK(list_directory(root, 0, kEnv).value().empty());
    CHECK(list_directory(dir / "missing", 1, kEnv).error().kind == ErrorKind::not_found);
    auto link = list_directory(dir / "root-link", 1, kEnv);
    CHECK(link.error().kind == ErrorKind::bad_request);
    CHECK(link.error().message == "path is a symbolic link, refusing to traverse: " + dir / "root-link");
    auto file = list_directory(root + "/b.txt", 1, kEnv);
    CHECK(file.error().kind == ErrorKind::bad_request);
    CHECK(file.error().message == "path is not a directory: " + root + "/b.txt");
  }
  SUBCASE("parse_list_depth") {
    CHECK(parse_list_depth("3").value() == 3);
    CHECK(parse_list_depth("0").value() == 0);
    CHECK(parse_list_depth("abc").error().message == "invalid query parameter 'depth': abc");
    CHECK(parse_list_depth("-1").error().kind == ErrorKind::bad_request);
    CHECK(parse_list_depth("").error().kind == ErrorKind::bad_request);
    CHECK(parse_list_depth("1x").error().kind == ErrorKind::bad_request);
    CHECK(parse_list_depth("99999999999").error().kind == ErrorKind::bad_request);
  }
}

// ---- mkdir ------------------------------------------------------------------

TEST_CASE("make_directories") {
  TempDir dir;
  write_file(dir / "file", "");

  SUBCASE("nested with a leaf mode; an existing directory keeps its mode (#1024)") {
    PermissionSpec spec{std::nullopt, std::nullopt, mode_t{0700}};
    REQUIRE(make_directories({{dir / "x/y/z", spec}}, kEnv).ok());
    CHECK(mode_of(dir / "x/y/z") == 0700);
    CHECK(mode_of(dir / "x/y") == (0777 & ~current_umask()));
    PermissionSpec again{std::nullopt, std::nullopt, mode_t{0750}};
    REQUIRE(make_directories({{dir / "x/y/z", again}}, kEnv).ok());
    CHECK(mode_of(dir / "x/y/z") == 0700);
    // An existing intermediate level is not touched either; the new leaf is.
    REQUIRE(make_directories({{dir / "x/y/new", again}}, kEnv).ok());
    CHECK(mode_of(dir / "x/y") == (0777 & ~current_umask()));
    CHECK(mode_of(dir / "x/y/new") == 0750);
    PermissionSpec none{};
    REQUIRE(make_directories({{dir / "x/y/z", none}}, kEnv).ok());
    CHECK(mode_of(dir / "x/y/z") == 0700);
  }
  SUBCASE("an existing directory's owner is left alone") {
    make_dir(dir / "mine", 0711);
    struct stat before {};
    REQUIRE(stat((dir / "mine").c_str(), &before) == 0);
    // Ask for another owner: as non-root this chown would fail with EPERM if
    // it were attempted; as root it would change the owner. Neither happens.
    PermissionSpec other{std::string("0"), std::string("0"), mode_t{0755}};
    if (getuid() == 0) other = PermissionSpec{std::string("65534"), std::string("65534"), mode_t{0755}};
    REQUIRE(make_directories({{dir / "mine", other}}, kEnv).ok());
    struct stat after {};
    REQUIRE(stat((dir / "mine").c_str(), &after) == 0);
    CHECK(after.st_uid == before.st_uid);
    CHECK(after.st_gid == before.st_gid);
    CHECK((after.st_mode & 07777) == 0711);
  }
  SUBCASE("a symlink to a directory counts as existing; its target is left alone") {
    make_dir(dir / "target", 0701);
    make_symlink(dir / "target", dir / "link");
    PermissionSpec spec{std::nullopt, std::nullopt, mode_t{0777}};
    REQUIRE(make_directories({{dir / "link", spec}}, kEnv).ok());
    CHECK(mode_of(dir / "target") == 0701);
  }
  SUBCASE("a directory created by an earlier item of the same request counts as existing") {
    PermissionSpec first{std::nullopt, std::nullopt, mode_t{0700}};
    PermissionSpec second{std::nullopt, std::nullopt, mode_t{0755}};
    // Items run in the given order (parse_permission_requests sorts keys).
    REQUIRE(make_directories({{dir / "p", first}, {dir / "p/", second}}, kEnv).ok());
    CHECK(mode_of(dir / "p") == 0700);
  }
  SUBCASE("an existing file anywhere on the path rejects the request up front") {
    auto result = make_directories({{dir / "fresh", {}}, {dir / "file/sub", {}}}, kEnv);
    REQUIRE_FALSE(result.ok());
    CHECK(result.error().kind == ErrorKind::conflict);
    CHECK_FALSE(exists(dir / "fresh"));
    CHECK(make_directories({{dir / "file", {}}}, kEnv).error().kind == ErrorKind::conflict);
  }
  SUBCASE("unknown owner rejects up front") {
    PermissionSpec bad{std::string("no-such-user-execd"), std::nullopt, std::nullopt};
    CHECK(make_directories({{dir / "fresh", {}}, {dir / "other", bad}}, kEnv).error().kind ==
          ErrorKind::bad_request);
    CHECK_FALSE(exists(dir / "fresh"));
  }
}

// ---- rm -rf -----------------------------------------------------------------

TEST_CASE("remove_tree never follows symlinks") {
  TempDir dir;
  make_dir(dir / "outside");
  write_file(dir / "outside/keep.txt", "keep");
  make_dir(dir / "tree");
  make_dir(dir / "tree/a");
  make_dir(dir / "tree/a/b");
  write_file(dir / "tree/a/b/f", "x");
  write_file(dir / "tree/top", "x");
  make_symlink(dir / "outside", dir / "tree/a/escape");
  make_symlink(dir / "outside/keep.txt", dir / "tree/filelink");
  make_symlink(dir / "nowhere", dir / "tree/a/b/dangling");
  make_dir(dir / "tree/a/locked");
  write_file(dir / "tree/a/locked/f", "x");
  REQUIRE(chmod((dir / "tree/a/locked").c_str(), 0700) == 0);

  REQUIRE(remove_directories({dir / "tree"}, kEnv).ok());
  CHECK_FALSE(exists(dir / "tree"));
  CHECK(read_file(dir / "outside/keep.txt") == "keep");

  // A symlink given directly is removed as a link.
  make_symlink(dir / "outside", dir / "link");
  REQUIRE(remove_tree(dir / "link").ok());
  CHECK_FALSE(exists(dir / "link"));
  CHECK(exists(dir / "outside/keep.txt"));

  // Files, missing paths and empty values are fine.
  write_file(dir / "plain", "");
  REQUIRE(remove_directories({dir / "plain", dir / "missing", ""}, kEnv).ok());
  CHECK_FALSE(exists(dir / "plain"));

  CHECK(remove_directories({"/"}, kEnv).error().kind == ErrorKind::bad_request);
  CHECK(remove_directories({"/tmp/.."}, kEnv).error().kind == ErrorKind::bad_request);
  CHECK(remove_directories({dir / "."}, kEnv).error().kind == ErrorKind::bad_request);
  CHECK(remove_directories({dir / "outside/.."}, kEnv).error().kind == ErrorKind::bad_request);
  CHECK(remove_directories({dir / "outside//"}, kEnv).ok());
  CHECK_FALSE(exists(dir / "outside"));
  CHECK(exists(dir.path()));
  CHECK(remove_directories({"$NO_SUCH_VAR_EXECD/x"}, kEnv).error().kind == ErrorKind::bad_request);
}

// ---- AtomicFile ---------------------------------------------------------------

TEST_CASE("AtomicFile") {
  TempDir dir;

  SUBCASE("chunks, commit, parent created, default mode") {
    auto opened = AtomicFile::open(dir / "new/sub/f.bin");
    REQUIRE(opened.ok());
    AtomicFile& file = opened.value();
    CHECK_FALSE(exists(dir / "new/sub/f.bin"));
    CHECK(file.write("hello ").ok());
    CHECK(file.write(std::string_view("\0world", 6)).ok());
    CHECK(file.bytes_written() == 12);
    REQUIRE(file.commit().ok());
    CHECK(file.committed());
    CHECK(read_file(dir / "new/sub/f.bin") == std::string("hello \0world", 12));
    CHECK(mode_of(dir / "new/sub/f.bin") == (0777 & ~current_umask()));
    CHECK(search_files(dir.path(), "*.tmp", 0, kEnv).value().files.empty());
  }
  SUBCASE("requested mode; existing file keeps its mode when none requested") {
    {
      auto opened = AtomicFile::open(dir / "secret", PermissionSpec{std::nullopt, std::nullopt, mode_t{0600}});
      REQUIRE(opened.ok());
      struct stat st {};
      REQUIRE(stat(opened.value().temp_path().c_str(), &st) == 0);
      CHECK((st.st_mode & 077) == 0);  // private while being written
      REQUIRE(opened.value().commit().ok());
      CHECK(mode_of(dir / "secret") == 0600);
    }
    write_file(dir / "existing", "old", 0640);
    auto opened = AtomicFile::open(dir / "existing");
    REQUIRE(opened.ok());
    CHECK(opened.value().write("new").ok());
    REQUIRE(opened.value().commit().ok());
    CHECK(read_file(dir / "existing") == "new");
    CHECK(mode_of(dir / "existing") == 0640);
  }
  SUBCASE("abort and destructor leave the target untouched") {
    write_file(dir / "keep", "original");
    std::string temp;
    {
      auto opened = AtomicFile::open(dir / "keep");
      REQUIRE(opened.ok());
      temp = opened.value().temp_path();
      CHECK(exists(temp));
      CHECK(opened.value().write("partial").ok());
    }  // destructor aborts
    CHECK_FALSE(exists(temp));
    CHECK(read_file(dir / "keep") == "original");

    auto opened = AtomicFile::open(dir / "keep");
    REQUIRE(opened.ok());
    CHECK(opened.value().write("partial").ok());
    opened.value().abort();
    opened.value().abort();  // idempotent
    CHECK_FALSE(exists(opened.value().temp_path()));
    CHECK(read_file(dir / "keep") == "original");
    CHECK_FALSE(opened.value().commit().ok());
  }
  SUBCASE("moves keep a single owner of the temp file") {
    auto opened = AtomicFile::open(dir / "moved");
    REQUIRE(opened.ok());
    AtomicFile file = std::move(opened.value());
    CHECK(file.write("m").ok());
    REQUIRE(file.commit().ok());
    CHECK(read_file(dir / "moved") == "m");
  }
  SUBCASE("flush all, then publish all") {
    auto a = AtomicFile::open(dir / "a");
    auto b = AtomicFile::open(dir / "b");
    REQUIRE((a.ok() && b.ok()));
    CHECK(a.value().write("A").ok());
    CHECK(b.value().write("B").ok());
    REQUIRE(a.value().flush().ok());
    REQUIRE(b.value().flush().ok());
    CHECK_FALSE(exists(dir / "a"));
    REQUIRE(a.value().publish().ok());
    REQUIRE(b.value().publish().ok());
    CHECK(read_file(dir / "a") == "A");
    CHECK(read_file(dir / "b") == "B");
  }
  SUBCASE("symlinks: followed when live, replaced when dangling") {
    write_file(dir / "target", "old");
    make_symlink("target", dir / "live");
    make_symlink("nowhere", dir / "dangling");
    auto live = AtomicFile::open(dir / "live");
    REQUIRE(live.ok());
    CHECK(live.value().write("through").ok());
    REQUIRE(live.value().commit().ok());
    CHECK(read_file(dir / "target") == "through");
    CHECK(stat_file_info(dir / "live").value().type == FileType::symlink);

    auto dangling = AtomicFile::open(dir / "dangling");
    REQUIRE(dangling.ok());
    CHECK(dangling.value().write("file").ok());
    REQUIRE(dangling.value().commit().ok());
    CHECK(stat_file_info(dir / "dangling").value().type == FileType::file);
  }
  SUBCASE("errors") {
    make_dir(dir / "adir");
    CHECK(AtomicFile::open(dir / "adir").error().kind == ErrorKind::conflict);
    write_file(dir / "afile", "");
    CHECK(AtomicFile::open(dir / "afile/child").error().kind == ErrorKind::conflict);
    PermissionSpec bad{std::string("no-such-user-execd"), std::nullopt, std::nullopt};
    CHECK(AtomicFile::open(dir / "x", bad).error().kind == ErrorKind::bad_request);
    CHECK_FALSE(exists(dir / "x"));
  }
}

#include "execd/files/file_jobs.h"

TEST_CASE("file system errors map to HTTP statuses and envelope codes") {
  using execd::files::file_error_status;
  CHECK(file_error_status(ErrorKind::not_found).status == 404);
  CHECK(file_error_status(ErrorKind::not_found).code == "FILE_NOT_FOUND");
  CHECK(file_error_status(ErrorKind::bad_request).status == 400);
  CHECK(file_error_status(ErrorKind::bad_request).code == "INVALID_REQUEST_BODY");
  CHECK(file_error_status(ErrorKind::forbidden).status == 403);
  CHECK(file_error_status(ErrorKind::no_space).status == 507);
  CHECK(file_error_status(ErrorKind::conflict).status == 500);
  CHECK(file_error_status(ErrorKind::internal).code == "RUNTIME_ERROR");
}

TEST_CASE("xattrs: an atomic file is published with its user.e2b.* attributes; reading filters by prefix") {
  TempDir dir;
  std::string target = dir / "tagged.txt";
  auto file = AtomicFile::open(target);
  REQUIRE(file);
  REQUIRE(file.value().write("x"));
  REQUIRE(file.value().write_xattrs("user.e2b.", {{"owner", "agent"}, {"stage", "draft"}}));
  CHECK(read_xattrs(target, "user.e2b.").empty());  // not there before the rename
  REQUIRE(file.value().commit());
  REQUIRE(setxattr(target.c_str(), "user.other", "o", 1, 0) == 0);
  auto got = read_xattrs(target, "user.e2b.");
  CHECK(got == std::map<std::string, std::string>{{"owner", "agent"}, {"stage", "draft"}});
  CHECK(read_xattrs(dir / "missing", "user.e2b.").empty());
  // Too large for the filesystem: an error that says so, not a silent drop.
  auto big = AtomicFile::open(dir / "big.txt");
  REQUIRE(big);
  auto st = big.value().write_xattrs("user.e2b.", {{"big", std::string(64 * 1024 + 1, 'x')}});
  CHECK_FALSE(st);
  if (!st) CHECK(st.error().kind == ErrorKind::bad_request);
}
