// fs/small_file on real files: whole reads by path and from a kept
// descriptor, the limit, and write_all.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "fs/small_file.h"

namespace {

struct Scratch {
  std::string dir, path;
  Scratch() {
    char tmpl[] = "/tmp/execd-unit-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    path = dir + "/f";
  }
  ~Scratch() {
    unlink(path.c_str());
    rmdir(dir.c_str());
  }
};

}  // namespace

TEST_CASE_FIXTURE(Scratch, "small files: read by path, reread from a kept descriptor, limits") {
  std::string text(20000, 'x');
  text += "end\n";
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  CHECK(execd::fs::write_all(fd, text) == 0);
  CHECK(execd::fs::read_small_file(path).value_or("") == text);
  CHECK_FALSE(execd::fs::read_small_file(path, text.size() - 1).has_value());
  CHECK_FALSE(execd::fs::read_small_file(dir + "/missing").has_value());

  // From offset 0 whatever the descriptor's offset (at the end after the
  // write), and leaving that offset where it was.
  CHECK(execd::fs::reread_small_file(fd).value_or("") == text);
  CHECK(lseek(fd, 0, SEEK_CUR) == static_cast<off_t>(text.size()));
  CHECK_FALSE(execd::fs::reread_small_file(fd, text.size() - 1).has_value());
  // Changed in place: the next reread sees the new bytes.
  CHECK(pwrite(fd, "y", 1, 0) == 1);
  CHECK(execd::fs::reread_small_file(fd).value_or("").front() == 'y');
  close(fd);
}
