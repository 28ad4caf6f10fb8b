// pty/pty_session: see header.
#include "pty/pty_session.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

namespace execd::pty {

// ---------------------------------------------------------------------------
// /proc helpers

namespace {
// Reads pgrp and session of a pid from /proc/<pid>/stat; false if gone.
bool read_ids(pid_t pid, pid_t& pgrp, pid_t& sid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[512];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  // "pid (comm) state ppid pgrp session ..."; comm may hold spaces and ')'.
  char* p = strrchr(buf, ')');
  if (!p) return false;
  char state;
  int ppid, pg, s;
  if (sscanf(p + 1, " %c %d %d %d", &state, &ppid, &pg, &s) != 4) return false;
  pgrp = pg;
  sid = s;
  return true;
}
}  // namespace

std::vector<pid_t> session_processes(pid_t sid) {
  std::vector<pid_t> out;
  if (sid <= 1) return out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  pid_t self = getpid();
  while (struct dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    pid_t pid = static_cast<pid_t>(atoi(e->d_name));
    if (pid <= 1 || pid == self) continue;
    pid_t pg, s;
    if (read_ids(pid, pg, s) && (s == sid || pg == sid)) out.push_back(pid);
  }
  closedir(d);
  return out;
}

void kill_session(pid_t sid, int sig) {
  if (sid <= 1) return;
  kill(-sid, sig);
  std::set<pid_t> signalled;
  for (int pass = 0; pass < 4; ++pass) {
    bool fresh = false;
    for (pid_t p : session_processes(sid)) {
      if (signalled.insert(p).second) fresh = true;
      kill(p, sig);
    }
    if (!fresh) break;
  }
}

// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------
// PtySession

PtySession::PtySession(Runtime& rt, size_t ring_bytes) : rt_(rt), loop_(rt.loop), ring_(ring_bytes) {}

PtySession::~PtySession() {
  listener_ = nullptr;
  close_stdin();
  if (cmd_) {
    cmd_->release();
    cmd_ = nullptr;
  }
}

bool PtySession::start(const SpawnOptions& opts, std::string& error) {
  pty_mode_ = opts.use_pty;
  SpawnOptions o = opts;
  if (!pty_mode_) o.pipe_stdin = true;
  cmd_ = Command::start(rt_, o, CommandLimits{0, 0, {}}, this, error);
  if (!cmd_) return false;
  started_ = true;
  pid_ = cmd_->pid();
  int in = cmd_->stdin_fd() >= 0 ? fcntl(cmd_->stdin_fd(), F_DUPFD_CLOEXEC, 3) : -1;
  if (pty_mode_ && in >= 0) master_dup_ = in;
  if (in >= 0) {
    stdin_ = FdWriter::open(
        loop_, in,
        [this] {
          if (on_stdin_drained_) on_stdin_drained_();
        },
        [](int) {});
  }
  return true;
}

void PtySession::close_stdin() {
  if (stdin_) {
    stdin_->close();  // closes master_dup_ too (same fd)
    stdin_ = nullptr;
  }
  master_dup_ = -1;
}

void PtySession::set_paused(bool paused) {
  if (cmd_ && !exited_) cmd_->set_paused(paused && listener_ != nullptr);
}

bool PtySession::write_stdin(const char* data, size_t len) {
  if (!stdin_ || exited_) return false;
  stdin_->write(data, len);
  return true;
}

size_t PtySession::stdin_queued() const { return stdin_ ? stdin_->queued() : 0; }

void PtySession::resize(unsigned short rows, unsigned short cols) {
  if (!pty_mode_ || master_dup_ < 0 || exited_) return;
  struct winsize ws {};
  ws.ws_row = rows;
  ws.ws_col = cols;
  ioctl(master_dup_, TIOCSWINSZ, &ws);
}

void PtySession::send_signal(int sig) {
  if (!cmd_ || exited_ || pid_ <= 0) return;
  pid_t target = pid_;
  if (pty_mode_ && master_dup_ >= 0) {
    pid_t fg = tcgetpgrp(master_dup_);
    if (fg > 0) target = fg;
  }
  kill(-target, sig);
}

void PtySession::kill_all() {
  if (cmd_ && cmd_->cgroup()) cmd_->cgroup()->kill_all();
  // Without cgroups: the keeper's tree (pty/keeper) is that too.
  if (cmd_ && cmd_->tree()) cmd_->tree()->kill_all();
  if (pid_ <= 0 || exited_) return;
  kill_session(pid_, SIGKILL);
}

void PtySession::on_output(Stream s, const uint8_t* data, size_t len) {
  ring_.append(data, len);
  if (listener_) listener_->on_pty_output(s, data, len);
}

void PtySession::on_finished(const Outcome& outcome) {
  exited_ = true;
  exit_code_ = outcome.exit_code ? *outcome.exit_code : -1;
  close_stdin();
  if (cmd_) {
    cmd_->release();
    cmd_ = nullptr;
  }
  if (listener_) listener_->on_pty_exit(exit_code_);
}

}  // namespace execd::pty
