// execd/watch/dir_watcher: see header.
#include "execd/watch/dir_watcher.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <vector>

#include "fs/pool_job.h"

namespace execd::watch {

namespace {

constexpr uint32_t kDirWatchMask = IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB |
                           IN_DELETE_SELF | IN_MOVE_SELF | IN_DONT_FOLLOW | IN_EXCL_UNLINK | IN_ONLYDIR;
// A tree with more directories than this is refused rather than walked.
constexpr size_t kMaxDirectories = 65536;

std::string join(const std::string& rel, const std::string& name) { return rel.empty() ? name : rel + "/" + name; }

// execd's own temporary files (fs::AtomicFile: ".<name>.execd-<hex>.tmp"):
// an upload shows as its file appearing, not as a temp file's life.
bool own_temp_file(const char* name) {
  std::string_view n(name);
  return n.size() > 12 && n[0] == '.' && n.substr(n.size() - 4) == ".tmp" && n.find(".execd-") != std::string_view::npos;
}

std::string watch_error(int err, const std::string& path) {
  if (err == ENOSPC)
    return "cannot watch " + path + ": the inotify watch limit is reached (fs.inotify.max_user_watches)";
  if (err == EMFILE)
    return "cannot watch " + path + ": too many inotify instances (fs.inotify.max_user_instances)";
  return "cannot watch " + path + ": " + strerror(err);
}

// Subdirectories of `path` (no symlinks followed), sorted.
std::vector<std::string> subdirectories(const std::string& path, std::vector<std::string>* all_names = nullptr) {
  std::vector<std::string> dirs;
  DIR* d = opendir(path.c_str());
  if (!d) return dirs;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (all_names) all_names->push_back(name);
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN) {
      struct stat st {};
      is_dir = lstat((path + "/" + name).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
    }
    if (is_dir) dirs.push_back(name);
  }
  closedir(d);
  std::sort(dirs.begin(), dirs.end());
  if (all_names) std::sort(all_names->begin(), all_names->end());
  return dirs;
}

}  // namespace

// The threadpool part of start(): the inotify instance and its watches.
struct DirWatcher::Setup {
  uv_work_t work;
  DirWatcher* owner = nullptr;  // null once the watcher went first
  std::string dir;
  bool recursive = false;
  int fd = -1;
  std::string error;
  std::unordered_map<int, std::string> paths;

  void run() {
    struct stat st {};
    if (stat(dir.c_str(), &st) != 0) {
      error = errno == ENOENT ? "directory not found: " + dir : "cannot watch " + dir + ": " + strerror(errno);
      return;
    }
    if (!S_ISDIR(st.st_mode)) {
      error = "path is not a directory: " + dir;
      return;
    }
    fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) {
      error = watch_error(errno, dir);
      return;
    }
    std::vector<std::string> todo = {""};
    while (!todo.empty()) {
      std::string rel = std::move(todo.back());
      todo.pop_back();
      std::string path = rel.empty() ? dir : dir + "/" + rel;
      // The watched directory may be reached through a symlink; nothing below it is.
      int wd = inotify_add_watch(fd, path.c_str(), (kDirWatchMask & ~IN_DONT_FOLLOW) | (rel.empty() ? 0u : IN_DONT_FOLLOW));
      if (wd < 0) {
        // A subdirectory that went away or cannot be read is skipped; the
        // root, or the kernel's limits, end the setup.
        if (rel.empty() || errno == ENOSPC || errno == ENOMEM) {
          error = watch_error(errno, path);
          return;
        }
        continue;
      }
      paths[wd] = rel;
      if (!recursive) break;
      if (paths.size() > kMaxDirectories) {
        error = "cannot watch " + dir + ": more than " + std::to_string(kMaxDirectories) + " directories";
        return;
      }
      for (const auto& sub : subdirectories(path)) todo.push_back(join(rel, sub));
    }
  }
};

struct DirWatcher::Handle {
  uv_poll_t poll;
  DirWatcher* owner = nullptr;
  int fd = -1;
};

std::unique_ptr<DirWatcher> DirWatcher::start(uv_loop_t* loop, std::string dir, bool recursive, OnEvent on_event,
                                              OnReady on_ready, OnError on_error) {
  std::unique_ptr<DirWatcher> w(new DirWatcher(loop, std::move(dir), recursive));
  w->on_event_ = std::move(on_event);
  w->on_ready_ = std::move(on_ready);
  w->on_error_ = std::move(on_error);
  auto* s = new Setup;
  s->work.data = s;
  s->owner = w.get();
  s->dir = w->dir_;
  s->recursive = recursive;
  w->setup_ = s;
  int rc = fs::queue_work(
      loop, &s->work, [](uv_work_t* work) { static_cast<Setup*>(work->data)->run(); },
      [](uv_work_t* work, int) {
        std::unique_ptr<Setup> s(static_cast<Setup*>(work->data));
        if (DirWatcher* owner = s->owner) {
          owner->setup_ = nullptr;
          owner->setup_done(*s);
        } else if (s->fd >= 0) {
          close(s->fd);  // the watcher is gone already
        }
      });
  if (rc != 0) {
    delete s;
    w->setup_ = nullptr;
    w->failed_ = true;
    if (w->on_ready_) w->on_ready_(std::string("cannot queue work: ") + uv_strerror(rc));
  }
  return w;
}

DirWatcher::~DirWatcher() {
  if (setup_) setup_->owner = nullptr;
  if (handle_) {
    handle_->owner = nullptr;
    uv_poll_stop(&handle_->poll);
    uv_close(reinterpret_cast<uv_handle_t*>(&handle_->poll), [](uv_handle_t* h) {
      auto* hd = reinterpret_cast<Handle*>(h);
      close(hd->fd);
      delete hd;
    });
  }
}

void DirWatcher::setup_done(Setup& s) {
  if (!s.error.empty()) {
    if (s.fd >= 0) close(s.fd);
    failed_ = true;
    return on_ready_(s.error);
  }
  fd_ = s.fd;
  paths_ = std::move(s.paths);
  handle_ = new Handle;
  handle_->owner = this;
  handle_->fd = fd_;
  handle_->poll.data = handle_;
  if (int rc = uv_poll_init(loop_, &handle_->poll, fd_); rc != 0) {
    delete handle_;
    handle_ = nullptr;
    close(fd_);
    fd_ = -1;
    failed_ = true;
    return on_ready_(std::string("cannot poll inotify: ") + uv_strerror(rc));
  }
  uv_poll_start(&handle_->poll, UV_READABLE, [](uv_poll_t* p, int, int) {
    auto* hd = static_cast<Handle*>(p->data);
    if (hd->owner) hd->owner->readable();
  });
  on_ready_(std::string());
}

void DirWatcher::readable() {
  alignas(inotify_event) char buf[64 * 1024];
  while (!failed_) {
    ssize_t n = read(fd_, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) fail(std::string("reading inotify: ") + strerror(errno));
      return;
    }
    if (n == 0) return;
    for (ssize_t at = 0; at + static_cast<ssize_t>(sizeof(inotify_event)) <= n && !failed_;) {
      auto* ev = reinterpret_cast<inotify_event*>(buf + at);
      handle(ev->wd, ev->mask, ev->len ? ev->name : "");
      at += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
    }
  }
}

void DirWatcher::handle(int wd, uint32_t mask, const char* name) {
  if (mask & IN_Q_OVERFLOW) return fail("events were lost: the kernel's inotify queue overflowed");
  auto it = paths_.find(wd);
  if (it == paths_.end()) return;
  const std::string rel_dir = it->second;
  if (mask & IN_IGNORED) {
    paths_.erase(it);
    if (rel_dir.empty()) fail("the watched directory " + dir_ + " is gone");
    return;
  }
  if (*name == '\0') {
    // The directory itself: only the watched one's end matters (a
    // subdirectory's removal is its parent's event).
    if (rel_dir.empty() && (mask & (IN_DELETE_SELF | IN_MOVE_SELF)))
      fail("the watched directory " + dir_ + (mask & IN_MOVE_SELF ? " was moved" : " was removed"));
    return;
  }
  if (own_temp_file(name)) return;
  std::string rel = join(rel_dir, name);
  if (mask & (IN_CREATE | IN_MOVED_TO)) {
    on_event_(Event{rel, Change::create});
    if (recursive_ && (mask & IN_ISDIR)) add_tree(rel);
  }
  if (mask & IN_MODIFY) on_event_(Event{rel, Change::write});
  if (mask & IN_ATTRIB) on_event_(Event{rel, Change::chmod});
  if (mask & IN_MOVED_FROM) on_event_(Event{rel, Change::rename});
  if (mask & IN_DELETE) on_event_(Event{rel, Change::remove});
}

void DirWatcher::add_tree(const std::string& rel) {
  // On the loop: a directory that was just made is small; what it holds
  // before its watch exists would otherwise go unreported.
  std::vector<std::string> todo = {rel};
  while (!todo.empty() && !failed_) {
    std::string r = std::move(todo.back());
    todo.pop_back();
    std::string path = dir_ + "/" + r;
    int wd = inotify_add_watch(fd_, path.c_str(), kDirWatchMask);
    if (wd < 0) {
      if (errno == ENOSPC) fail(watch_error(errno, path));
      continue;
    }
    paths_[wd] = r;
    if (paths_.size() > kMaxDirectories) return fail("more than " + std::to_string(kMaxDirectories) + " directories");
    std::vector<std::string> names;
    auto subs = subdirectories(path, &names);
    for (const auto& n : names) on_event_(Event{join(r, n), Change::create});
    for (const auto& s : subs) todo.push_back(join(r, s));
  }
}

void DirWatcher::fail(const std::string& error) {
  if (failed_) return;
  failed_ = true;
  if (handle_) uv_poll_stop(&handle_->poll);
  if (on_error_) on_error_(error);
}

}  // namespace execd::watch
