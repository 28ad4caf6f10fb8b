// fs/watch_scan: see header.
#include "fs/watch_scan.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "fs/paths.h"
#include "protocol/sha.h"

namespace execd::fs {

namespace {
protocol::EntryType type_of(mode_t m) {
  if (S_ISREG(m)) return protocol::EntryType::file;
  if (S_ISDIR(m)) return protocol::EntryType::dir;
  if (S_ISLNK(m)) return protocol::EntryType::symlink;
  return protocol::EntryType::other;
}
}  // namespace

protocol::EntryStat stat_for_watch(const std::string& path) {
  protocol::EntryStat s;
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return s;
  s.exists = true;
  s.type = type_of(st.st_mode);
  s.size = static_cast<uint64_t>(st.st_size);
  s.mtime_ms = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
  s.mode = st.st_mode & 07777;
  return s;
}

ResolvedRoot resolve_watch_root(const std::string& given) {
  ResolvedRoot r;
  auto expanded = expand_path_abs(given, process_env_lookup());
  if (!expanded) {
    r.error = expanded.error().message;
    r.status = 400;
    return r;
  }
  char buf[PATH_MAX];
  if (!realpath(expanded.value().c_str(), buf)) {
    int e = errno;
    r.error = (e == ENOENT ? "no such directory: " : std::string(strerror(e)) + ": ") + expanded.value();
    r.status = e == ENOENT ? 404 : e == EACCES ? 403 : 400;
    return r;
  }
  struct stat st {};
  if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) {
    r.error = std::string("not a directory: ") + buf;
    r.status = 400;
    return r;
  }
  if (access(buf, R_OK | X_OK) != 0) {
    r.error = std::string("cannot read directory: ") + buf;
    r.status = 403;
    return r;
  }
  r.path = buf;
  return r;
}

TreeScan watch_tree(int inotify_fd, const std::string& dir, uint32_t mask, bool recursive, size_t max_dirs,
                    bool list_entries, size_t max_entries) {
  TreeScan out;
  std::deque<std::string> todo{dir};
  bool first = true;
  while (!todo.empty()) {
    std::string d = std::move(todo.front());
    todo.pop_front();
    if (out.dirs.size() >= max_dirs) {
      out.dir_limit = true;
      out.first_unwatched = d;
      break;
    }
    int wd = inotify_add_watch(inotify_fd, d.c_str(), mask | IN_ONLYDIR | IN_DONT_FOLLOW);
    if (wd < 0) {
      if (first) {
        out.error = errno;
        return out;
      }
      continue;  // gone meanwhile, or not ours to read: skipped
    }
    first = false;
    out.dirs.push_back({wd, d});
    if (!recursive && !list_entries) continue;
    DIR* dp = opendir(d.c_str());
    if (!dp) continue;
    while (struct dirent* e = readdir(dp)) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      std::string child = join_path(d, e->d_name);
      protocol::EntryType t;
      if (e->d_type == DT_UNKNOWN) {
        struct stat st {};
        if (lstat(child.c_str(), &st) != 0) continue;
        t = type_of(st.st_mode);
      } else {
        t = e->d_type == DT_DIR   ? protocol::EntryType::dir
            : e->d_type == DT_REG ? protocol::EntryType::file
            : e->d_type == DT_LNK ? protocol::EntryType::symlink
                                  : protocol::EntryType::other;
      }
      if (list_entries && out.entries.size() < max_entries) out.entries.emplace_back(child, t);
      if (recursive && t == protocol::EntryType::dir) todo.push_back(std::move(child));
    }
    closedir(dp);
  }
  return out;
}

std::string sha256_of_file(const std::string& path, uint64_t max_bytes, bool& too_large) {
  too_large = false;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return {};
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return {};
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    too_large = true;
    close(fd);
    return {};
  }
  protocol::Sha256 h;
  std::string buf(1 << 16, '\0');
  uint64_t total = 0;
  for (;;) {
    ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      close(fd);
      return {};
    }
    if (n == 0) break;
    total += static_cast<uint64_t>(n);
    if (total > max_bytes) {  // grew while read
      too_large = true;
      close(fd);
      return {};
    }
    h.update(buf.data(), static_cast<size_t>(n));
  }
  close(fd);
  return protocol::lower_hex(h.finish());
}

}  // namespace execd::fs
