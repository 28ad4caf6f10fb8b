// fs/accounts: user and group lookups (file owners, archive entry names, the
// user a command runs as). A dynamic execd asks NSS (getpwnam_r & co), so it
// sees every source /etc/nsswitch.conf names. A static execd must not: glibc
// then dlopens the modules beyond its built-in files and dns (systemd, sss,
// ldap ...) into a process that has no dynamic libc for them, and they
// crash there (libnss_systemd, on the first uid /etc/passwd does not name:
// a file listing was enough). So a static execd reads /etc/passwd and
// /etc/group itself, which is the "files" source, where a container's or a
// micro-VM's accounts live.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace execd::fs {

struct Account {
  uid_t uid = 0;
  gid_t gid = 0;
  std::string name;
  std::string home;
};

struct GroupEntry {
  gid_t gid = 0;
  std::string name;
};

std::optional<Account> account_named(std::string_view name);
std::optional<Account> account_with_uid(uid_t uid);
std::optional<GroupEntry> group_named(std::string_view name);
std::optional<GroupEntry> group_with_gid(gid_t gid);
// `gid` first, then the other groups that list `user` (getgrouplist's order).
std::vector<gid_t> groups_of(const std::string& user, gid_t gid);

// The files source alone, from the given files: what a static execd uses,
// here so that either build can test it.
namespace files {
std::optional<Account> account(const char* passwd_path, std::optional<std::string_view> name,
                               std::optional<uid_t> uid);
std::optional<GroupEntry> group(const char* group_path, std::optional<std::string_view> name,
                                std::optional<gid_t> gid);
std::vector<gid_t> groups_of(const char* group_path, const std::string& user, gid_t gid);
}  // namespace files

}  // namespace execd::fs
