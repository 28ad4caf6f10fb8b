// fs/file_info.cc — FileInfo construction, formatting and id/name lookups.
#include "fs/file_info.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <vector>

#include "fs/accounts.h"

namespace execd::fs {
namespace {

template <typename Id>
std::optional<Id> parse_numeric_id(std::string_view text) {
  if (text.empty()) return std::nullopt;
  unsigned long long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  if (value >= static_cast<unsigned long long>(static_cast<Id>(-1))) return std::nullopt;
  return static_cast<Id>(value);
}

}  // namespace

std::string_view file_type_name(FileType type) {
  switch (type) {
    case FileType::file: return "file";
    case FileType::directory: return "directory";
    case FileType::symlink: return "symlink";
    case FileType::other: return "other";
  }
  return "other";
}

const std::string& OwnerNames::user(uid_t uid) {
  auto it = users_.find(uid);
  if (it == users_.end()) it = users_.emplace(uid, user_name_for(uid)).first;
  return it->second;
}

const std::string& OwnerNames::group(gid_t gid) {
  auto it = groups_.find(gid);
  if (it == groups_.end()) it = groups_.emplace(gid, group_name_for(gid)).first;
  return it->second;
}

FileInfo file_info_from_stat(std::string path, const struct stat& st, OwnerNames* names) {
  FileInfo info;
  info.path = std::move(path);
  if (S_ISREG(st.st_mode)) {
    info.type = FileType::file;
  } else if (S_ISDIR(st.st_mode)) {
    info.type = FileType::directory;
  } else if (S_ISLNK(st.st_mode)) {
    info.type = FileType::symlink;
  } else {
    info.type = FileType::other;
  }
  info.size = static_cast<int64_t>(st.st_size);
  info.modified_at = st.st_mtim;
  info.created_at = st.st_ctim;
  info.owner = names ? names->user(st.st_uid) : user_name_for(st.st_uid);
  info.group = names ? names->group(st.st_gid) : group_name_for(st.st_gid);
  info.mode = st.st_mode & 07777;
  return info;
}

Result<FileInfo> stat_file_info(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    int err = errno;
    if (err == ENOENT) return Error{ErrorKind::not_found, "file not found: " + path};
    return errno_error(err, "lstat " + path);
  }
  return file_info_from_stat(path, st);
}

unsigned mode_to_octal_digits(mode_t mode) {
  unsigned digits = 0;
  unsigned scale = 1;
  mode &= 07777;
  while (mode != 0) {
    digits += (mode & 7) * scale;
    scale *= 10;
    mode >>= 3;
  }
  return digits;
}

std::string format_rfc3339_nano(const timespec& ts) {
  tm local{};
  time_t seconds = ts.tv_sec;
  localtime_r(&seconds, &local);
  char buffer[64];
  size_t len = strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%S", &local);
  std::string out(buffer, len);
  if (ts.tv_nsec != 0) {
    char fraction[16];
    std::snprintf(fraction, sizeof fraction, ".%09ld", static_cast<long>(ts.tv_nsec));
    std::string_view f(fraction);
    while (f.back() == '0') f.remove_suffix(1);
    out += f;
  }
  long offset = local.tm_gmtoff;
  if (offset == 0) {
    out += 'Z';
  } else {
    char sign = offset < 0 ? '-' : '+';
    if (offset < 0) offset = -offset;
    char zone[32];
    std::snprintf(zone, sizeof zone, "%c%02ld:%02ld", sign, offset / 3600, (offset % 3600) / 60);
    out += zone;
  }
  return out;
}

std::string user_name_for(uid_t uid) {
  if (auto a = account_with_uid(uid)) return a->name;
  return std::to_string(uid);
}

std::string group_name_for(gid_t gid) {
  if (auto g = group_with_gid(gid)) return g->name;
  return std::to_string(gid);
}

std::optional<uid_t> uid_for_name(std::string_view name) {
  if (name.empty()) return std::nullopt;
  if (auto a = account_named(name)) return a->uid;
  return parse_numeric_id<uid_t>(name);
}

std::optional<gid_t> gid_for_name(std::string_view name) {
  if (name.empty()) return std::nullopt;
  if (auto g = group_named(name)) return g->gid;
  return parse_numeric_id<gid_t>(name);
}

void to_json(nlohmann::json& out, const FileInfo& info) {
  out = nlohmann::json{
      {"path", info.path},
      {"type", file_type_name(info.type)},
      {"size", info.size},
      {"modified_at", format_rfc3339_nano(info.modified_at)},
      {"created_at", format_rfc3339_nano(info.created_at)},
      {"owner", info.owner},
      {"group", info.group},
      {"mode", mode_to_octal_digits(info.mode)},
  };
}

nlohmann::json to_json(const FileInfo& info) {
  nlohmann::json out;
  to_json(out, info);
  return out;
}

}  // namespace execd::fs
