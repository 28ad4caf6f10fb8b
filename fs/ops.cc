// fs/ops.cc — implementation of the filesystem operations (see ops.h).
//
// Tree walks are descriptor-based (openat + O_NOFOLLOW + fstatat with
// AT_SYMLINK_NOFOLLOW) so a symlink swapped in mid-walk is never followed.
#include "fs/ops.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <map>
#include <set>

#include "fs/atomic_file.h"
#include "fs/glob.h"

namespace execd::fs {
namespace {

// Closes a descriptor on scope exit.
class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  ~FdGuard() {
    if (fd_ >= 0) close(fd_);
  }
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Names in the directory open at `dirfd` (borrowed), sorted bytewise,
// without "." and "..".
Result<std::vector<std::string>> read_sorted_names(int dirfd, const std::string& display_path) {
  int dup_fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return errno_error(errno, "read directory " + display_path);
  DIR* dir = fdopendir(dup_fd);
  if (!dir) {
    int err = errno;
    close(dup_fd);
    return errno_error(err, "read directory " + display_path);
  }
  rewinddir(dir);  // the duplicate shares the offset with earlier reads
  std::vector<std::string> names;
  for (;;) {
    errno = 0;
    dirent* entry = readdir(dir);
    if (!entry) {
      int err = errno;
      closedir(dir);
      if (err != 0) return errno_error(err, "read directory " + display_path);
      break;
    }
    std::string_view name(entry->d_name);
    if (name == "." || name == "..") continue;
    names.emplace_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

struct WalkEntry {
  const std::string& path;      // absolute (root + relative)
  const std::string& relative;  // relative to the walk root
  std::string_view name;
  const struct stat& st;  // lstat data
  int level;              // 0 = direct child of the root
};
enum class WalkAction { descend, skip, stop };
using WalkVisitor = std::function<WalkAction(const WalkEntry&)>;

// Pre-order walk of the directory open at `dirfd` (borrowed). Entries that
// vanish and subdirectories that cannot be opened are skipped. Returns false
// when the visitor stopped the walk.
bool walk_directory(int dirfd, const std::string& dir_path, const std::string& dir_relative, int level,
                    const WalkVisitor& visit) {
  auto names = read_sorted_names(dirfd, dir_path);
  if (!names) return true;  // unreadable: nothing to visit
  for (const std::string& name : names.value()) {
    struct stat st {};
    if (fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    std::string path = join_path(dir_path, name);
    std::string relative = dir_relative.empty() ? name : dir_relative + "/" + name;
    WalkAction action = visit(WalkEntry{path, relative, name, st, level});
    if (action == WalkAction::stop) return false;
    if (action != WalkAction::descend || !S_ISDIR(st.st_mode)) continue;
    int child = openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (child < 0) continue;  // unreadable or replaced meanwhile: skip it
    FdGuard guard(child);
    if (!walk_directory(child, path, relative, level + 1, visit)) return false;
  }
  return true;
}

Error not_found_error(const std::string& path) { return Error{ErrorKind::not_found, "file not found: " + path}; }

// stat (following symlinks) with ENOENT -> not_found.
Result<struct stat> stat_existing(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return not_found_error(path);
    return errno_error(errno, "stat " + path);
  }
  return st;
}

Status remove_directory_contents(int dirfd, const std::string& display_path) {
  // A second pass catches entries created while the first one ran.
  for (int pass = 0; pass < 3; ++pass) {
    auto names = read_sorted_names(dirfd, display_path);
    if (!names) return names.error();
    if (names.value().empty()) return Status::success();
    for (const std::string& name : names.value()) {
      std::string child_path = join_path(display_path, name);
      struct stat st {};
      if (fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;
        return errno_error(errno, "stat " + child_path);
      }
      if (S_ISDIR(st.st_mode)) {
        int child = openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (child >= 0) {
          Status inner;
          {
            FdGuard guard(child);
            inner = remove_directory_contents(child, child_path);
          }
          if (!inner) return inner;
          if (unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
            return errno_error(errno, "remove " + child_path);
          }
          continue;
        }
        if (errno == ENOENT) continue;
        if (errno != ELOOP && errno != ENOTDIR) return errno_error(errno, "open " + child_path);
        // Replaced by a symlink or file meanwhile: unlink it below.
      }
      if (unlinkat(dirfd, name.c_str(), 0) != 0 && errno != ENOENT) {
        return errno_error(errno, "remove " + child_path);
      }
    }
  }
  return Status::success();
}

}  // namespace

// ---- info -------------------------------------------------------------------

Result<std::vector<PathInfo>> get_file_info(const std::vector<std::string>& paths, const EnvLookup& env) {
  std::vector<PathInfo> out;
  out.reserve(paths.size());
  for (const std::string& requested : paths) {
    auto absolute = expand_path_abs(requested, env);
    if (!absolute) return absolute.error();
    auto info = stat_file_info(absolute.value());
    if (!info) return info.error();
    out.push_back(PathInfo{requested, std::move(info.value())});
  }
  return out;
}

nlohmann::json file_info_map_json(const std::vector<PathInfo>& infos) {
  nlohmann::json out = nlohmann::json::object();
  for (const PathInfo& item : infos) out[item.requested_path] = to_json(item.info);
  return out;
}

// ---- delete files -------------------------------------------------------------

Status delete_files(const std::vector<std::string>& paths, const EnvLookup& env) {
  std::vector<std::string> to_unlink;
  for (const std::string& requested : paths) {
    auto absolute = expand_path_abs(requested, env);
    if (!absolute) return absolute.error();
    struct stat st {};
    if (lstat(absolute.value().c_str(), &st) != 0) {
      if (errno == ENOENT) continue;  // already gone: fine
      return errno_error(errno, "lstat " + absolute.value());
    }
    if (S_ISDIR(st.st_mode)) {
      return Error{ErrorKind::conflict, "path is a directory: " + absolute.value()};
    }
    to_unlink.push_back(std::move(absolute.value()));
  }
  for (const std::string& path : to_unlink) {
    if (unlink(path.c_str()) != 0 && errno != ENOENT) return errno_error(errno, "remove " + path);
  }
  return Status::success();
}

// ---- permissions / mkdir ----------------------------------------------------

Status set_permissions(const std::vector<PermissionRequest>& requests, const EnvLookup& env) {
  std::vector<std::pair<std::string, ResolvedPermissions>> prepared;
  for (const PermissionRequest& request : requests) {
    auto absolute = expand_path_abs(request.path, env);
    if (!absolute) return absolute.error();
    auto resolved = resolve_permissions(request.spec);
    if (!resolved) return resolved.error();
    auto exists = stat_existing(absolute.value());
    if (!exists) return exists.error();
    prepared.emplace_back(std::move(absolute.value()), resolved.value());
  }
  for (const auto& [path, permissions] : prepared) {
    if (auto applied = apply_permissions(path, permissions); !applied) return applied;
  }
  return Status::success();
}

Status make_directories(const std::vector<PermissionRequest>& requests, const EnvLookup& env) {
  std::vector<std::pair<std::string, ResolvedPermissions>> prepared;
  for (const PermissionRequest& request : requests) {
    auto absolute = expand_path_abs(request.path, env);
    if (!absolute) return absolute.error();
    auto resolved = resolve_permissions(request.spec);
    if (!resolved) return resolved.error();
    // The nearest existing ancestor (or the path itself) must be a directory.
    std::string probe = absolute.value();
    for (;;) {
      struct stat st {};
      if (stat(probe.c_str(), &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
          return Error{ErrorKind::conflict, "path exists and is not a directory: " + probe};
        }
        break;
      }
      if (errno != ENOENT) return errno_error(errno, "stat " + probe);
      if (probe == "/") break;
      probe = parent_path(probe);
    }
    prepared.emplace_back(std::move(absolute.value()), resolved.value());
  }
  for (const auto& [path, permissions] : prepared) {
    // Upstream #1024: a directory that already exists (stat, so a symlink to
    // a directory counts) keeps its mode and owner; only a leaf this request
    // creates gets the spec. Checked here, not during validation, so an
    // earlier item that creates the path counts as "existing" too.
    struct stat st {};
    bool existed = stat(path.c_str(), &st) == 0;
    if (auto made = make_directory_tree(path, 0777); !made) return made;
    if (existed) continue;
    if (auto applied = apply_permissions(path, permissions); !applied) return applied;
  }
  return Status::success();
}

// ---- move -------------------------------------------------------------------

Status move_files(const std::vector<MoveRequest>& requests, const EnvLookup& env) {
  // Validation simulates the moves: `overlay` records paths that earlier
  // items create (true) or vacate (false).
  std::map<std::string, bool> overlay;
  auto exists = [&overlay](const std::string& path) {
    if (auto it = overlay.find(path); it != overlay.end()) return it->second;
    struct stat st {};
    return lstat(path.c_str(), &st) == 0;
  };
  std::vector<std::pair<std::string, std::string>> moves;
  for (const MoveRequest& request : requests) {
    auto src = expand_path_abs(request.src, env);
    if (!src) return src.error();
    auto dest = expand_path_abs(request.dest, env);
    if (!dest) return dest.error();
    if (!exists(src.value())) {
      return Error{ErrorKind::not_found, "source path not found: " + src.value()};
    }
    if (exists(dest.value())) {
      return Error{ErrorKind::conflict, "destination path already exists: " + dest.value()};
    }
    overlay[src.value()] = false;
    overlay[dest.value()] = true;
    moves.emplace_back(std::move(src.value()), std::move(dest.value()));
  }
  for (const auto& [src, dest] : moves) {
    if (auto made = make_directory_tree(parent_path(dest), 0755); !made) return made;
    if (renameat2(AT_FDCWD, src.c_str(), AT_FDCWD, dest.c_str(), RENAME_NOREPLACE) == 0) continue;
    int err = errno;
    if (err == EINVAL || err == ENOSYS) {
      // Filesystem without RENAME_NOREPLACE: check, then plain rename.
      struct stat st {};
      if (lstat(dest.c_str(), &st) == 0) err = EEXIST;
      else if (rename(src.c_str(), dest.c_str()) == 0) continue;
      else err = errno;
    }
    if (err == EEXIST) return Error{ErrorKind::conflict, "destination path already exists: " + dest};
    if (err == ENOENT) return Error{ErrorKind::not_found, "source path not found: " + src};
    return errno_error(err, "rename " + src + " to " + dest);
  }
  return Status::success();
}

// ---- search -----------------------------------------------------------------

Result<std::unique_ptr<SearchWalk>> SearchWalk::start(std::string_view root, std::string_view pattern,
                                                      const EnvLookup& env) {
  auto absolute = expand_path_abs(root, env);
  if (!absolute) return absolute.error();
  const std::string& root_path = absolute.value();
  std::string pattern_text = pattern.empty() ? std::string("**") : std::string(pattern);
  std::string why;
  auto glob = GlobPattern::compile(pattern_text, &why);
  if (!glob) return Error{ErrorKind::bad_request, "invalid search pattern '" + pattern_text + "': " + why};

  std::unique_ptr<SearchWalk> walk(new SearchWalk(std::move(*glob)));
  struct stat root_stat {};
  if (stat(root_path.c_str(), &root_stat) != 0 || !S_ISDIR(root_stat.st_mode)) {
    // Not a directory (or a dangling symlink): test the entry itself.
    struct stat entry {};
    if (lstat(root_path.c_str(), &entry) != 0) {
      if (errno == ENOENT) return not_found_error(root_path);
      return errno_error(errno, "lstat " + root_path);
    }
    std::string name = base_name(root_path);
    if (!S_ISDIR(entry.st_mode) && walk->glob_.matches_entry(name, name)) {
      walk->pending_.push_back(file_info_from_stat(root_path, entry));
    }
    return walk;
  }
  int fd = open(root_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_error(errno, "open " + root_path);
  auto names = read_sorted_names(fd, root_path);
  walk->levels_.push_back(Level{fd, root_path, "", names ? std::move(names.value()) : std::vector<std::string>{}});
  return walk;
}

SearchWalk::~SearchWalk() {
  for (Level& level : levels_) close(level.fd);
}

bool SearchWalk::next(std::vector<FileInfo>& out, size_t max_files, size_t max_entries,
                      const std::atomic<bool>* cancelled) {
  size_t appended = 0, visited = 0;
  if (!pending_.empty()) {
    for (FileInfo& info : pending_) out.push_back(std::move(info));
    appended = pending_.size();
    pending_.clear();
  }
  // Pre-order, lexical: the same order as walk_directory.
  while (!levels_.empty()) {
    if (appended >= max_files || visited >= max_entries) return true;
    if (cancelled && cancelled->load(std::memory_order_relaxed)) return false;
    Level& level = levels_.back();
    if (level.next == level.names.size()) {
      close(level.fd);
      levels_.pop_back();
      continue;
    }
    const std::string& name = level.names[level.next++];
    ++visited;
    struct stat st {};
    if (fstatat(level.fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // vanished
    std::string path = join_path(level.path, name);
    std::string relative = level.relative.empty() ? name : level.relative + "/" + name;
    if (S_ISDIR(st.st_mode)) {
      int child = openat(level.fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (child < 0) continue;  // unreadable or replaced meanwhile: skip it
      auto names = read_sorted_names(child, path);
      // `level` may move when levels_ grows: nothing below uses it.
      levels_.push_back(Level{child, std::move(path), std::move(relative),
                              names ? std::move(names.value()) : std::vector<std::string>{}});
      continue;
    }
    if (!glob_.matches_entry(relative, name)) continue;
    out.push_back(file_info_from_stat(path, st, &names_));
    ++appended;
  }
  return false;
}

Result<SearchResult> search_files(std::string_view root, std::string_view pattern, size_t max_results,
                                  const EnvLookup& env) {
  auto walk = SearchWalk::start(root, pattern, env);
  if (!walk) return walk.error();
  SearchResult result;
  size_t limit = max_results == 0 ? SIZE_MAX : max_results;
  while (walk.value()->next(result.files, limit - result.files.size(), SIZE_MAX)) {
    if (result.files.size() < limit) continue;
    // Full: one more match means the result was cut.
    std::vector<FileInfo> extra;
    while (extra.empty() && walk.value()->next(extra, 1, SIZE_MAX)) {
    }
    result.truncated = !extra.empty();
    break;
  }
  return result;
}

// ---- replace ----------------------------------------------------------------

Result<uint64_t> stream_replace(int in_fd, std::string_view old_text, std::string_view new_text,
                                const ByteSink& sink, size_t chunk_size) {
  if (old_text.empty()) return Error{ErrorKind::bad_request, "old content must not be empty"};
  chunk_size = std::max<size_t>(chunk_size, 1);
  std::string pending;  // unscanned input: a possible match prefix + the new chunk
  std::string output;   // coalesces small pieces into chunk-sized writes
  uint64_t count = 0;
  std::vector<char> chunk(chunk_size);

  auto emit = [&](std::string_view piece) -> Status {
    output.append(piece);
    if (output.size() < chunk_size) return Status::success();
    Status written = sink(output);
    output.clear();
    return written;
  };

  bool eof = false;
  while (!eof) {
    ssize_t n = read(in_fd, chunk.data(), chunk_size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error(errno, "read");
    }
    if (n == 0) {
      eof = true;
    } else {
      pending.append(chunk.data(), static_cast<size_t>(n));
    }
    std::string_view view(pending);
    size_t pos = 0;
    for (size_t hit; (hit = view.find(old_text, pos)) != std::string_view::npos;) {
      if (auto s = emit(view.substr(pos, hit - pos)); !s) return s.error();
      if (auto s = emit(new_text); !s) return s.error();
      pos = hit + old_text.size();
      ++count;
    }
    // Hold back a tail that could be the start of a match straddling the
    // next chunk.
    size_t keep = eof ? 0 : std::min(old_text.size() - 1, view.size() - pos);
    size_t flush_end = view.size() - keep;
    if (auto s = emit(view.substr(pos, flush_end - pos)); !s) return s.error();
    pending.erase(0, flush_end);
  }
  if (!output.empty()) {
    if (auto s = sink(output); !s) return s.error();
  }
  return count;
}

Result<std::vector<ReplaceOutcome>> replace_in_files(const std::vector<ReplaceRequest>& requests,
                                                     const EnvLookup& env) {
  struct Prepared {
    const ReplaceRequest* request;
    std::string real_path;
  };
  std::vector<Prepared> prepared;
  std::set<std::string> seen;
  for (const ReplaceRequest& request : requests) {
    auto absolute = expand_path_abs(request.path, env);
    if (!absolute) return absolute.error();
    auto st = stat_existing(absolute.value());
    if (!st) return st.error();
    if (!S_ISREG(st.value().st_mode)) {
      return Error{ErrorKind::bad_request, "not a regular file: " + absolute.value()};
    }
    if (request.old_text.empty()) return Error{ErrorKind::bad_request, "old content must not be empty"};
    char real[PATH_MAX];
    if (!realpath(absolute.value().c_str(), real)) return errno_error(errno, "resolve " + absolute.value());
    if (!seen.insert(real).second) {
      return Error{ErrorKind::bad_request, "file named more than once: " + absolute.value()};
    }
    prepared.push_back(Prepared{&request, real});
  }

  // Phase 1: write every changed file to a flushed temp file.
  std::vector<ReplaceOutcome> outcomes;
  std::vector<AtomicFile> pending;
  for (const Prepared& item : prepared) {
    int in = open(item.real_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (in < 0) return errno_error(errno, "open " + item.real_path);
    FdGuard guard(in);
    auto out = AtomicFile::open(item.real_path);
    if (!out) return out.error();
    AtomicFile& file = out.value();
    auto count = stream_replace(in, item.request->old_text, item.request->new_text,
                                [&file](std::string_view bytes) { return file.write(bytes); });
    if (!count) return count.error();
    outcomes.push_back(ReplaceOutcome{item.request->path, count.value()});
    if (count.value() == 0) continue;  // unchanged: temp file discarded
    if (auto flushed = file.flush(); !flushed) return flushed.error();
    pending.push_back(std::move(file));
  }
  // Phase 2: publish them all.
  for (AtomicFile& file : pending) {
    if (auto published = file.publish(); !published) return published.error();
  }
  return outcomes;
}

nlohmann::json replace_outcomes_json(const std::vector<ReplaceOutcome>& outcomes) {
  nlohmann::json out = nlohmann::json::object();
  for (const ReplaceOutcome& outcome : outcomes) {
    out[outcome.path] = nlohmann::json{{"replacedCount", outcome.replaced_count}};
  }
  return out;
}

// ---- list -------------------------------------------------------------------

Result<int> parse_list_depth(std::optional<std::string_view> raw) {
  if (!raw) return 1;
  std::string_view text = *raw;
  auto invalid = Error{ErrorKind::bad_request, "invalid query parameter 'depth': " + std::string(text)};
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < 0) return invalid;
  return value;
}

Result<std::vector<FileInfo>> list_directory(std::string_view path, int depth, const EnvLookup& env) {
  auto absolute = expand_path_abs(path, env);
  if (!absolute) return absolute.error();
  const std::string& root = absolute.value();
  struct stat st {};
  if (lstat(root.c_str(), &st) != 0) {
    if (errno == ENOENT) return not_found_error(root);
    return errno_error(errno, "lstat " + root);
  }
  if (S_ISLNK(st.st_mode)) {
    return Error{ErrorKind::bad_request, "path is a symbolic link, refusing to traverse: " + root};
  }
  if (!S_ISDIR(st.st_mode)) return Error{ErrorKind::bad_request, "path is not a directory: " + root};

  std::vector<FileInfo> entries;
  if (depth <= 0) return entries;
  int fd = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return errno_error(errno, "open " + root);
  FdGuard guard(fd);
  // The root itself must be readable; deeper failures are skipped by the walk.
  auto readable = read_sorted_names(fd, root);
  if (!readable) return readable.error();
  OwnerNames names;
  walk_directory(fd, root, "", 0, [&](const WalkEntry& entry) {
    entries.push_back(file_info_from_stat(entry.path, entry.st, &names));
    return entry.level + 1 < depth ? WalkAction::descend : WalkAction::skip;
  });
  return entries;
}

// ---- rm -rf -----------------------------------------------------------------

Status remove_tree(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::success();
    return errno_error(errno, "lstat " + path);
  }
  if (S_ISDIR(st.st_mode)) {
    int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      Status removed;
      {
        FdGuard guard(fd);
        removed = remove_directory_contents(fd, path);
      }
      if (!removed) return removed;
      if (rmdir(path.c_str()) != 0 && errno != ENOENT) return errno_error(errno, "remove " + path);
      return Status::success();
    }
    if (errno == ENOENT) return Status::success();
    if (errno != ELOOP && errno != ENOTDIR) return errno_error(errno, "open " + path);
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) return errno_error(errno, "remove " + path);
  return Status::success();
}

Status remove_directories(const std::vector<std::string>& paths, const EnvLookup& env) {
  std::vector<std::string> prepared;
  for (const std::string& requested : paths) {
    if (requested.empty()) continue;
    auto expanded = expand_path(requested, env);
    if (!expanded) return expanded.error();
    // Judge the last component before cleaning: "dir/." must not become "dir"
    // (rm -rf and Go's RemoveAll refuse such paths too).
    std::string_view raw = expanded.value();
    while (raw.size() > 1 && raw.back() == '/') raw.remove_suffix(1);
    std::string raw_base = base_name(raw);
    std::string clean = clean_path(raw);
    if (clean == "/" || raw_base == "." || raw_base == "..") {
      return Error{ErrorKind::bad_request, "refusing to remove " + requested};
    }
    prepared.push_back(std::move(clean));
  }
  for (const std::string& path : prepared) {
    if (auto removed = remove_tree(path); !removed) return removed;
  }
  return Status::success();
}

}  // namespace execd::fs
