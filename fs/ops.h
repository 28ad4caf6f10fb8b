// fs/ops.h — the synchronous filesystem operations behind /files/* and
// /directories (the Go daemon's file API). Plain blocking calls meant for the libuv
// threadpool: no shared mutable state, reentrant lookups only.
//
// Every multi-item operation validates all items first (path expansion,
// existence, owner/group names, modes) and changes nothing if any is rejected.
// Paths are the raw strings from the request; each op expands them itself
// (ExpandAbs or Expand, per route as the Go daemon does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fs/error.h"
#include "fs/file_info.h"
#include "fs/glob.h"
#include "fs/paths.h"
#include "fs/permissions.h"

namespace execd::fs {

// ---- GET /files/info --------------------------------------------------------
struct PathInfo {
  std::string requested_path;  // as given: the response key
  FileInfo info;               // info.path is absolute
};
// lstat each path (ExpandAbs). Missing -> not_found.
Result<std::vector<PathInfo>> get_file_info(const std::vector<std::string>& paths, const EnvLookup& env);
// {"<requested>": FileInfo, ...}
nlohmann::json file_info_map_json(const std::vector<PathInfo>& infos);

// ---- DELETE /files ----------------------------------------------------------
// Unlinks files (ExpandAbs). Missing -> fine. Symlinks (dangling or to a
// directory) are removed as links. A real directory -> conflict, checked for
// all paths before anything is unlinked.
Status delete_files(const std::vector<std::string>& paths, const EnvLookup& env);

// ---- POST /files/permissions, POST /directories -----------------------------
struct PermissionRequest {
  std::string path;  // as given
  PermissionSpec spec;
};
// chown/chmod (ExpandAbs, follows symlinks). Missing path -> not_found;
// unknown owner/group -> bad_request; both before anything changes.
Status set_permissions(const std::vector<PermissionRequest>& requests, const EnvLookup& env);
// mkdir -p each (ExpandAbs, 0777 & ~umask per created level), then the spec
// on the leaf if this call created it. An existing directory (or symlink to
// one) is left alone: its mode and owner are not touched (upstream #1024).
// An existing non-directory -> conflict. Paths, modes and owner/group names
// are validated up front for every item (an unknown owner is bad_request even
// for a directory that exists; Go ignores the spec there).
Status make_directories(const std::vector<PermissionRequest>& requests, const EnvLookup& env);

// ---- POST /files/mv ---------------------------------------------------------
struct MoveRequest {
  std::string src;
  std::string dest;
};
// In order (ExpandAbs both): src must exist (lstat; dangling symlinks can be
// moved) else not_found; dest must not exist else conflict; dest's parent is
// created (mkdir -p 0755); rename without clobbering (renameat2
// RENAME_NOREPLACE). Validation simulates the earlier moves, so chains like
// a->b, b->c are accepted. Cross-device moves fail (conflict, EXDEV text).
Status move_files(const std::vector<MoveRequest>& requests, const EnvLookup& env);

// ---- GET /files/search ------------------------------------------------------
struct SearchResult {
  std::vector<FileInfo> files;
  bool truncated = false;  // max_results reached
};
// Walks `root` (ExpandAbs) in lexical byte order without following symlinks
// (only a root symlink to a directory is followed). Directories are never
// returned. Pattern (default "**" if empty) per GlobPattern::matches_entry:
// with a '/', against the path relative to root, else the basename.
// Unreadable or vanished subdirectories are skipped. max_results 0 = no cap.
// Errors: root missing -> not_found; malformed pattern -> bad_request.
Result<SearchResult> search_files(std::string_view root, std::string_view pattern, size_t max_results,
                                  const EnvLookup& env);

// The same walk in slices, for streaming: each next() call visits a bounded
// number of entries, so a pool thread is never held for a whole tree and a
// walk whose client left stops at the next slice (or at once, through
// `cancelled`). Holds one open descriptor per directory level.
class SearchWalk {
 public:
  // Expands and opens the root; errors as search_files.
  static Result<std::unique_ptr<SearchWalk>> start(std::string_view root, std::string_view pattern,
                                                   const EnvLookup& env);
  ~SearchWalk();
  SearchWalk(const SearchWalk&) = delete;
  SearchWalk& operator=(const SearchWalk&) = delete;

  // Appends matches to `out` until `max_files` were appended, `max_entries`
  // entries were visited, `*cancelled` turned true or the walk ended.
  // Returns false once the walk is over (nothing more will be appended).
  bool next(std::vector<FileInfo>& out, size_t max_files, size_t max_entries,
            const std::atomic<bool>* cancelled = nullptr);

 private:
  struct Level {
    int fd;
    std::string path, relative;
    std::vector<std::string> names;  // sorted
    size_t next = 0;
  };
  explicit SearchWalk(GlobPattern glob) : glob_(std::move(glob)) {}
  GlobPattern glob_;
  OwnerNames names_;
  std::vector<Level> levels_;
  std::vector<FileInfo> pending_;  // a root that is not a directory: its one match
};

// ---- POST /files/replace ----------------------------------------------------
struct ReplaceRequest {
  std::string path;  // as given
  std::string old_text;
  std::string new_text;
};
struct ReplaceOutcome {
  std::string path;  // as given
  uint64_t replaced_count = 0;
};
// Replaces all non-overlapping occurrences, left to right, streaming in
// bounded chunks. Validation first: ExpandAbs, exists (not_found), regular
// file after following symlinks (bad_request), old non-empty (bad_request),
// no file named twice (bad_request). Then every changed file is written to a
// temp file and flushed; only when all succeeded are they renamed over the
// originals (mode kept, owner kept when permitted). Files without a match are
// not rewritten.
Result<std::vector<ReplaceOutcome>> replace_in_files(const std::vector<ReplaceRequest>& requests,
                                                     const EnvLookup& env);
// {"<path>": {"replacedCount": N}, ...}
nlohmann::json replace_outcomes_json(const std::vector<ReplaceOutcome>& outcomes);

// The streaming core, exposed for tests: reads `in_fd` to EOF in chunks of
// `chunk_size`, hands the rewritten bytes to `sink` (in pieces of at most
// ~chunk_size), returns the number of replacements.
using ByteSink = std::function<Status(std::string_view)>;
Result<uint64_t> stream_replace(int in_fd, std::string_view old_text, std::string_view new_text,
                                const ByteSink& sink, size_t chunk_size = 64 * 1024);

// ---- GET /directories/list --------------------------------------------------
// Parses the `depth` query value (absent -> 1); non-integer or negative ->
// bad_request "invalid query parameter 'depth': <raw>".
Result<int> parse_list_depth(std::optional<std::string_view> raw);
// Root (ExpandAbs) checked with lstat: missing -> not_found; symlink ->
// bad_request "path is a symbolic link, refusing to traverse: <abs>"; not a
// directory -> bad_request "path is not a directory: <abs>". depth 0 -> [].
// Pre-order, entries sorted by name (bytes), a directory's listing follows it
// while level + 1 < depth; symlinks are listed and never entered; the root is
// not included. Unreadable subdirectories are listed but not entered.
Result<std::vector<FileInfo>> list_directory(std::string_view path, int depth, const EnvLookup& env);

// ---- DELETE /directories ----------------------------------------------------
// rm -rf each path (Expand, not made absolute). Empty values are skipped;
// missing = fine; "/" is refused (bad_request). Symlinks are removed as links
// and never followed, at any depth.
Status remove_directories(const std::vector<std::string>& paths, const EnvLookup& env);
// rm -rf one already-expanded path, openat/unlinkat based.
Status remove_tree(const std::string& path);

}  // namespace execd::fs
