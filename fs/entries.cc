// fs/entries: see header.
#include "fs/entries.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>

#include "fs/paths.h"

namespace execd::fs {

std::string resolve_user_path(std::string_view path, const std::string& home) {
  std::string p(path);
  if (p.empty() || p == "~") return clean_path(home);
  if (p.rfind("~/", 0) == 0) return clean_path(home + p.substr(1));
  if (p[0] != '/') return clean_path(home + "/" + p);
  return clean_path(p);
}

Result<Entry> stat_entry(const std::string& path) {
  Entry e;
  e.path = path;
  e.name = base_name(clean_path(path));
  if (lstat(path.c_str(), &e.st) != 0) {
    int err = errno;
    Error x = errno_error(err, "lstat " + path);
    if (err == ENOENT || err == ENOTDIR) x = Error{ErrorKind::not_found, "file not found: " + path};
    return x;
  }
  if (S_ISLNK(e.st.st_mode)) {
    e.is_symlink = true;
    e.target_ok = stat(path.c_str(), &e.target) == 0;
    char buf[PATH_MAX];
    e.resolved = realpath(path.c_str(), buf) ? std::string(buf) : path;
  }
  return e;
}

Result<std::vector<Entry>> walk_entries(const std::string& shown_root, const std::string& real_root, int depth,
                                        size_t max_entries) {
  std::vector<Entry> out;
  struct Level {
    std::string rel;
    int depth;
  };
  // Directories still to list; the order of the output is set at the end.
  std::vector<Level> todo = {{"", 0}};
  bool first = true;
  while (!todo.empty()) {
    Level level = std::move(todo.back());
    todo.pop_back();
    std::string dir = level.rel.empty() ? real_root : real_root + "/" + level.rel;
    DIR* d = opendir(dir.c_str());
    if (!d) {
      if (first) return errno_error(errno, "opendir " + dir);
      continue;  // listed by its parent, not entered
    }
    first = false;
    std::vector<std::string> names;
    while (dirent* de = readdir(d)) {
      std::string n = de->d_name;
      if (n != "." && n != "..") names.push_back(std::move(n));
    }
    closedir(d);
    if (out.size() + names.size() > max_entries)
      return Error{ErrorKind::no_space, "more than " + std::to_string(max_entries) + " entries under " + shown_root +
                                            " (--envd-max-list-entries); list with a smaller depth"};
    std::sort(names.begin(), names.end());
    std::vector<Level> subdirs;
    for (const auto& n : names) {
      std::string rel = level.rel.empty() ? n : level.rel + "/" + n;
      auto e = stat_entry(real_root + "/" + rel);
      if (!e) continue;  // gone meanwhile
      e.value().path = join_path(shown_root, rel);
      if (S_ISDIR(e.value().st.st_mode) && level.depth + 1 < depth) subdirs.push_back({rel, level.depth + 1});
      out.push_back(std::move(e.value()));
    }
    for (auto& s : subdirs) todo.push_back(std::move(s));
  }
  // Lexical by path component ("a/b" before "a-c"): each directory's entries
  // right after it, as Go's filepath.WalkDir gives them.
  std::stable_sort(out.begin(), out.end(), [&](const Entry& a, const Entry& b) {
    std::string_view pa = a.path, pb = b.path;
    // Compare component-wise so that "a/b" sorts before "a-c".
    size_t i = 0;
    while (i < pa.size() && i < pb.size() && pa[i] == pb[i]) ++i;
    if (i == pa.size() || i == pb.size()) return pa.size() < pb.size();
    char ca = pa[i] == '/' ? '\0' : pa[i], cb = pb[i] == '/' ? '\0' : pb[i];
    return static_cast<unsigned char>(ca) < static_cast<unsigned char>(cb);
  });
  return out;
}

Status make_dirs_owned(const std::string& path, std::optional<uid_t> uid, std::optional<gid_t> gid) {
  std::string p = clean_path(path);
  std::vector<std::string> missing;
  struct stat st {};
  for (std::string d = p; !d.empty() && d != "/" && d != "."; d = parent_path(d)) {
    if (stat(d.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) return Error{ErrorKind::conflict, "not a directory: " + d};
      break;
    }
    if (errno != ENOENT) return errno_error(errno, "stat " + d);
    missing.push_back(d);
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (mkdir(it->c_str(), 0755) != 0 && errno != EEXIST) return errno_error(errno, "mkdir " + *it);
    if (uid || gid)
      if (lchown(it->c_str(), uid ? *uid : static_cast<uid_t>(-1), gid ? *gid : static_cast<gid_t>(-1)) != 0)
        return errno_error(errno, "chown " + *it);
  }
  return Status::success();
}

Status rename_replacing(const std::string& from, const std::string& to, std::optional<uid_t> uid,
                        std::optional<gid_t> gid) {
  struct stat st {};
  if (lstat(from.c_str(), &st) != 0) {
    if (errno == ENOENT) return Error{ErrorKind::not_found, "source file not found: " + from};
    return errno_error(errno, "lstat " + from);
  }
  if (auto s = make_dirs_owned(parent_path(clean_path(to)), uid, gid); !s) return s;
  if (rename(from.c_str(), to.c_str()) != 0) return errno_error(errno, "rename " + from + " to " + to);
  return Status::success();
}

}  // namespace execd::fs
