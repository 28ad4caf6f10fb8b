// pty/keeper: see header.
#include "pty/keeper.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "pty/keeper_image.h"
#include "pty/reaper.h"

namespace execd::pty {

namespace {

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U  // Linux 6.3; older kernels refuse the flag (EINVAL)
#endif

bool opened_embedded = false;

// Whether the kernel lets this pid namespace exec a memfd at all.
bool memfd_exec_allowed() {
  char v = 0;
  int fd = open("/proc/sys/vm/memfd_noexec", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;  // before Linux 6.3: always
  bool ok = read(fd, &v, 1) == 1 && v != '2';
  close(fd);
  return ok;
}

// Runs `<fd> --probe` and waits: the keeper must exec where execd runs
// (an LSM or a seccomp filter may refuse what the sysctl allows).
bool exec_works(int fd) {
  char name[] = "execd-keeper", probe[] = "--probe";
  char* argv[] = {name, probe, nullptr};
  char* envp[] = {nullptr};
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    syscall(SYS_execveat, fd, "", argv, envp, AT_EMPTY_PATH);
    _exit(127);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int embedded_keeper() {
  std::string_view image = keeper_image();
  if (image.empty() || !memfd_exec_allowed()) return -1;
  int fd = static_cast<int>(syscall(SYS_memfd_create, "execd-keeper", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC));
  if (fd < 0 && errno == EINVAL)
    fd = static_cast<int>(syscall(SYS_memfd_create, "execd-keeper", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (fd < 0) return -1;
  size_t done = 0;
  while (done < image.size()) {
    ssize_t n = write(fd, image.data() + done, image.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  // Sealed: nothing (not even execd, by a bug) can change what runs as root.
  if (done != image.size() ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0 ||
      fchmod(fd, 0500) != 0) {
    close(fd);
    return -1;
  }
  // Kept open read-only: a file open for writing cannot be exec'd (ETXTBSY).
  char self[64];
  snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
  int ro = open(self, O_RDONLY | O_CLOEXEC);
  close(fd);
  if (ro >= 0 && !exec_works(ro)) {
    close(ro);
    return -1;
  }
  return ro;
}

int open_keeper() {
  int fd = embedded_keeper();
  if (fd >= 0) {
    opened_embedded = true;
    return fd;
  }
  return open("/proc/self/exe", O_PATH | O_CLOEXEC);
}

}  // namespace

int keeper_executable() {
  static int fd = open_keeper();
  return fd;
}

bool keeper_is_embedded() {
  keeper_executable();
  return opened_embedded;
}

int count_descendants(pid_t root) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task", static_cast<int>(root));
  if (access(path, F_OK) != 0) return errno == ENOENT ? 0 : -1;
  int n = 0;
  for (pid_t p : tree_below(root))
    if (!is_gone_or_exiting(p)) ++n;
  return n;
}

KeptTree::~KeptTree() {
  if (report_fd_ >= 0) close(report_fd_);
}

int KeptTree::population() const {
  if (gone_) return 0;
  return count_descendants(keeper_);
}

namespace {
bool ask_keeper(pid_t keeper, int sig) {
  union sigval v {};
  v.sival_int = sig;
  return sigqueue(keeper, SIGUSR1, v) == 0;
}
}  // namespace

int KeptTree::kill_all() {
  if (gone_) return 0;
  signalled_ = true;
  int n = population();
  ask_keeper(keeper_, SIGKILL);
  return n;
}

void KeptTree::signal_all(int sig) {
  if (gone_) return;
  signalled_ = true;
  ask_keeper(keeper_, sig);
}

bool KeptTree::read_reports(const std::function<void(const KeeperReport&)>& on_record) {
  if (report_fd_ < 0) return true;
  KeeperReport r;
  for (;;) {
    ssize_t n = read(report_fd_, &r, sizeof r);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return true;
    if (n != static_cast<ssize_t>(sizeof r)) return false;
    last_ = r;
    if (r.kind == KeeperReport::tree_empty) final_ = true;
    if (on_record) on_record(r);
  }
}

void Keepers::init(uv_loop_t* loop, Reaper* reaper) {
  loop_ = loop;
  reaper_ = reaper;
  uv_timer_init(loop, &timer_);
  timer_.data = this;
  timer_open_ = true;
  uv_unref(reinterpret_cast<uv_handle_t*>(&timer_));
}

void Keepers::add(const std::shared_ptr<KeptTree>& t, std::function<void()> on_gone) {
  t->on_gone_ = std::move(on_gone);
  live_[t->keeper_] = t;
  pid_t pid = t->keeper_;
  reaper_->watch(pid, [this, pid](const ExitInfo&) {
    auto it = live_.find(pid);
    if (it == live_.end()) return;
    std::shared_ptr<KeptTree> tree = std::move(it->second);
    live_.erase(it);
    tree->gone_ = true;
    std::function<void()> cb = std::move(tree->on_gone_);
    tree->on_gone_ = nullptr;
    if (cb) {
      cb();
    } else {
      tree->read_reports(nullptr);
    }
  });
}

void Keepers::linger(const std::shared_ptr<KeptTree>& t, uint64_t deadline_ms) {
  t->on_gone_ = nullptr;
  if (t->gone_ || !deadline_ms) return;
  t->deadline_ms_ = deadline_ms;
  if (timer_open_ && !uv_is_active(reinterpret_cast<uv_handle_t*>(&timer_)))
    uv_timer_start(&timer_, [](uv_timer_t* h) { static_cast<Keepers*>(h->data)->on_tick(); }, 100, 100);
}

void Keepers::on_tick() {
  uint64_t now = uv_now(loop_);
  bool waiting = false;
  for (auto& [pid, t] : live_) {
    if (!t->deadline_ms_) continue;
    if (now >= t->deadline_ms_) {
      t->kill_all();
      t->deadline_ms_ = 0;
    } else {
      waiting = true;
    }
  }
  if (!waiting) uv_timer_stop(&timer_);
}

size_t Keepers::lingering_with_members() const {
  size_t n = 0;
  for (const auto& [pid, t] : live_)
    if (!t->on_gone_ && t->population() > 0) ++n;
  return n;
}

void Keepers::kill_everything() {
  for (auto& [pid, t] : live_) t->kill_all();
}

void Keepers::close() {
  if (!timer_open_) return;
  timer_open_ = false;
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
}

}  // namespace execd::pty
