// fs/file_info.h — the FileInfo object of the Go daemon's file API: lstat data, owner and
// group names, RFC 3339 times, JSON serialisation. Also the thread-safe
// uid/gid <-> name lookups used by permission changes.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "fs/error.h"

namespace execd::fs {

enum class FileType { file, directory, symlink, other };
std::string_view file_type_name(FileType type);  // "file", "directory", "symlink", "other"

struct FileInfo {
  std::string path;  // absolute
  FileType type = FileType::other;
  int64_t size = 0;  // symlink: length of the target string; directory: st_size
  timespec modified_at{};
  timespec created_at{};  // ctime (inode change), as the Go daemon reports
  std::string owner;      // user name, or the numeric uid as a string
  std::string group;      // group name, or the numeric gid as a string
  mode_t mode = 0;        // st_mode & 07777
};

// lstat(path) -> FileInfo. ENOENT -> not_found ("file not found: <path>").
Result<FileInfo> stat_file_info(const std::string& path);
// Owner and group names remembered for the length of one walk: every lookup
// goes through NSS (reading /etc/passwd and /etc/group each time, tens of
// microseconds), and a walk meets the same few owners over and over.
class OwnerNames {
 public:
  const std::string& user(uid_t uid);
  const std::string& group(gid_t gid);

 private:
  std::unordered_map<uid_t, std::string> users_;
  std::unordered_map<gid_t, std::string> groups_;
};

// Builds a FileInfo from stat data already at hand (used by walks with
// fstatat), looking names up through `names` when given.
FileInfo file_info_from_stat(std::string path, const struct stat& st, OwnerNames* names = nullptr);

// JSON shape: {"path","type","size","modified_at","created_at","owner","group","mode"}
// where mode is the permission bits written as octal digits read as decimal
// (0755 -> 755, 04755 -> 4755).
nlohmann::json to_json(const FileInfo& info);
void to_json(nlohmann::json& out, const FileInfo& info);  // for nlohmann's ADL

// 0755 -> 755, 04750 -> 4750.
unsigned mode_to_octal_digits(mode_t mode);

// Go RFC3339Nano in the local zone: "2025-12-22T09:08:05.123456789Z",
// trailing fractional zeros dropped, "+08:00"-style offsets elsewhere.
std::string format_rfc3339_nano(const timespec& ts);

// Name lookups (fs/accounts); numeric fallback.
std::string user_name_for(uid_t uid);
std::string group_name_for(gid_t gid);
// Name -> id; a purely numeric string is accepted as an id when no such name
// exists. nullopt = unknown.
std::optional<uid_t> uid_for_name(std::string_view name);
std::optional<gid_t> gid_for_name(std::string_view name);

}  // namespace execd::fs
