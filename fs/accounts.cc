// fs/accounts: see header.
#include "fs/accounts.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <memory>

namespace execd::fs {
namespace {

struct FileCloser {
  void operator()(FILE* f) const { fclose(f); }
};
using File = std::unique_ptr<FILE, FileCloser>;

Account account_of(const passwd& pw) {
  return Account{pw.pw_uid, pw.pw_gid, pw.pw_name ? pw.pw_name : "", pw.pw_dir ? pw.pw_dir : ""};
}

GroupEntry group_of(const group& gr) { return GroupEntry{gr.gr_gid, gr.gr_name ? gr.gr_name : ""}; }

// Calls read(entry, buffer, size, &found) until it stops asking for a larger
// buffer (ERANGE); true with `found` set when an entry was read.
template <typename Entry, typename Read>
bool read_entry(std::vector<char>& buffer, Entry& entry, Entry*& found, Read read) {
  int rc;
  while ((rc = read(&entry, buffer.data(), buffer.size(), &found)) == ERANGE) buffer.resize(buffer.size() * 2);
  return rc == 0 && found;
}

bool name_is(const char* have, std::optional<std::string_view> want) { return want && have && *want == have; }

}  // namespace

namespace files {

std::optional<Account> account(const char* passwd_path, std::optional<std::string_view> name,
                               std::optional<uid_t> uid) {
  File f(fopen(passwd_path, "re"));
  if (!f) return std::nullopt;
  std::vector<char> buffer(4096);
  passwd entry{};
  passwd* found = nullptr;
  // fgetpwent_r skips lines it cannot parse; ERANGE leaves the stream at
  // the start of that line, so the retry reads it again.
  while (read_entry(buffer, entry, found, [&](passwd* e, char* b, size_t n, passwd** r) {
    return fgetpwent_r(f.get(), e, b, n, r);
  })) {
    if (name_is(found->pw_name, name) || (uid && found->pw_uid == *uid)) return account_of(*found);
  }
  return std::nullopt;
}

std::optional<GroupEntry> group(const char* group_path, std::optional<std::string_view> name,
                                std::optional<gid_t> gid) {
  File f(fopen(group_path, "re"));
  if (!f) return std::nullopt;
  std::vector<char> buffer(4096);
  struct group entry{};
  struct group* found = nullptr;
  while (read_entry(buffer, entry, found, [&](struct group* e, char* b, size_t n, struct group** r) {
    return fgetgrent_r(f.get(), e, b, n, r);
  })) {
    if (name_is(found->gr_name, name) || (gid && found->gr_gid == *gid)) return group_of(*found);
  }
  return std::nullopt;
}

std::vector<gid_t> groups_of(const char* group_path, const std::string& user, gid_t gid) {
  std::vector<gid_t> groups{gid};
  File f(fopen(group_path, "re"));
  if (!f) return groups;
  std::vector<char> buffer(4096);
  struct group entry{};
  struct group* found = nullptr;
  while (read_entry(buffer, entry, found, [&](struct group* e, char* b, size_t n, struct group** r) {
    return fgetgrent_r(f.get(), e, b, n, r);
  })) {
    if (std::find(groups.begin(), groups.end(), found->gr_gid) != groups.end()) continue;
    for (char** m = found->gr_mem; m && *m; ++m) {
      if (user == *m) {
        groups.push_back(found->gr_gid);
        break;
      }
    }
  }
  return groups;
}

}  // namespace files

#ifdef EXECD_ACCOUNTS_FROM_FILES

std::optional<Account> account_named(std::string_view name) { return files::account("/etc/passwd", name, {}); }
std::optional<Account> account_with_uid(uid_t uid) { return files::account("/etc/passwd", {}, uid); }
std::optional<GroupEntry> group_named(std::string_view name) { return files::group("/etc/group", name, {}); }
std::optional<GroupEntry> group_with_gid(gid_t gid) { return files::group("/etc/group", {}, gid); }
std::vector<gid_t> groups_of(const std::string& user, gid_t gid) { return files::groups_of("/etc/group", user, gid); }

#else

namespace {

std::vector<char> lookup_buffer(int which) {
  long hint = sysconf(which);
  return std::vector<char>(hint > 0 ? static_cast<size_t>(hint) : 4096);
}

}  // namespace

std::optional<Account> account_named(std::string_view name) {
  std::string key(name);
  std::vector<char> buffer = lookup_buffer(_SC_GETPW_R_SIZE_MAX);
  passwd entry{};
  passwd* found = nullptr;
  if (!read_entry(buffer, entry, found, [&](passwd* e, char* b, size_t n, passwd** r) {
        return getpwnam_r(key.c_str(), e, b, n, r);
      }))
    return std::nullopt;
  return account_of(*found);
}

std::optional<Account> account_with_uid(uid_t uid) {
  std::vector<char> buffer = lookup_buffer(_SC_GETPW_R_SIZE_MAX);
  passwd entry{};
  passwd* found = nullptr;
  if (!read_entry(buffer, entry, found, [&](passwd* e, char* b, size_t n, passwd** r) {
        return getpwuid_r(uid, e, b, n, r);
      }))
    return std::nullopt;
  return account_of(*found);
}

std::optional<GroupEntry> group_named(std::string_view name) {
  std::string key(name);
  std::vector<char> buffer = lookup_buffer(_SC_GETGR_R_SIZE_MAX);
  group entry{};
  group* found = nullptr;
  if (!read_entry(buffer, entry, found, [&](group* e, char* b, size_t n, group** r) {
        return getgrnam_r(key.c_str(), e, b, n, r);
      }))
    return std::nullopt;
  return group_of(*found);
}

std::optional<GroupEntry> group_with_gid(gid_t gid) {
  std::vector<char> buffer = lookup_buffer(_SC_GETGR_R_SIZE_MAX);
  group entry{};
  group* found = nullptr;
  if (!read_entry(buffer, entry, found, [&](group* e, char* b, size_t n, group** r) {
        return getgrgid_r(gid, e, b, n, r);
      }))
    return std::nullopt;
  return group_of(*found);
}

std::vector<gid_t> groups_of(const std::string& user, gid_t gid) {
  int n = 64;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  if (getgrouplist(user.c_str(), gid, groups.data(), &n) < 0) {
    groups.resize(static_cast<size_t>(n));
    getgrouplist(user.c_str(), gid, groups.data(), &n);
  }
  groups.resize(static_cast<size_t>(n));
  return groups;
}

#endif

}  // namespace execd::fs
