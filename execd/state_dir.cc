// execd/state_dir: see header.
#include "execd/state_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace execd {

namespace {

bool make_dirs(const std::string& path) {
  std::string cur;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || (path[i] == '/' && i > 0)) {
      cur = path.substr(0, i);
      if (mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST) return false;
    }
  }
  return true;
}

// Holds an exclusive lock on <dir>/lock for the life of the process (the
// descriptor is close-on-exec: a command must not keep it after execd dies).
// A lock that is taken is tried again for a while: an execd killed a moment
// ago still holds it through its launchers (pty/launcher), which share its
// descriptor table and die by PR_SET_PDEATHSIG only after it has, so a
// supervisor's immediate restart would otherwise find the directory "in use"
// (or, without --state-dir, fall back to a directory that loses every record).
int lock_state_dir(const std::string& dir) {
  constexpr int kLockWaitMs = 3000, kLockRetryMs = 10;
  int fd = open((dir + "/lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  for (int waited = 0; flock(fd, LOCK_EX | LOCK_NB) != 0; waited += kLockRetryMs) {
    int e = errno;
    if (e != EWOULDBLOCK || waited >= kLockWaitMs) {
      close(fd);
      errno = e;
      return -1;
    }
    struct timespec pause = {0, kLockRetryMs * 1000000L};
    nanosleep(&pause, nullptr);
  }
  chmod(dir.c_str(), 0700);
  return fd;
}

}  // namespace

std::string claim_state_dir(Config& cfg, bool& private_dir) {
  private_dir = false;
  if (cfg.state_dir.empty()) {
    cfg.state_dir = kDefaultStateDir;
    if (!make_dirs(cfg.state_dir) || lock_state_dir(cfg.state_dir) < 0) {
      const char* tmp = getenv("TMPDIR");
      std::string fallback = std::string(tmp && *tmp ? tmp : "/tmp") + "/execd-" + std::to_string(getpid());
      spdlog::warn("state dir {} unusable ({}): records and the journal go to {} and do not survive a restart",
                   cfg.state_dir, strerror(errno), fallback);
      cfg.state_dir = fallback;
      private_dir = true;
    }
  }
  if (private_dir || cfg.state_dir_given) {
    if (!make_dirs(cfg.state_dir)) return "cannot create --state-dir " + cfg.state_dir + ": " + strerror(errno);
    if (lock_state_dir(cfg.state_dir) < 0)
      return "--state-dir " + cfg.state_dir + ": " + (errno == EWOULDBLOCK ? "in use by another execd" : strerror(errno));
  }
  return {};
}

void remove_private_state_dir(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) unlink((dir + "/" + e->d_name).c_str());
    closedir(d);
  }
  rmdir(dir.c_str());
}

}  // namespace execd
