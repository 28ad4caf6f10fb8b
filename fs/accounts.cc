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

// fgetpwent_r or fgetgrent_r.
template <typename Entry>
using ReadFrom = int (*)(FILE*, Entry*, char*, size_t, Entry**);

// Each entry of a passwd or group file, until visit(entry) returns true.
template <typename Entry, typename Visit>
void each_entry(const char* path, ReadFrom<Entry> read_from, Visit visit) {
  File f(fopen(path, "re"));
  if (!f) return;
  std::vector<char> buffer(4096);
  Entry entry{};
  Entry* found = nullptr;
  // Lines it cannot parse are skipped; ERANGE leaves the stream at the
  // start of that line, so the retry reads it again.
  auto read = [&](Entry* e, char* b, size_t n, Entry** r) { return read_from(f.get(), e, b, n, r); };
  while (read_entry(buffer, entry, found, read)) {
    if (visit(*found)) return;
  }
}

bool name_is(const char* have, std::optional<std::string_view> want) { return want && have && *want == have; }

}  // namespace

namespace files {

std::optional<Account> account(const char* passwd_path, std::optional<std::string_view> name,
                               std::optional<uid_t> uid) {
  std::optional<Account> out;
  each_entry<passwd>(passwd_path, fgetpwent_r, [&](const passwd& pw) {
    if (name_is(pw.pw_name, name) || (uid && pw.pw_uid == *uid)) out = account_of(pw);
    return out.has_value();
  });
  return out;
}

std::optional<GroupEntry> group(const char* group_path, std::optional<std::string_view> name,
                                std::optional<gid_t> gid) {
  std::optional<GroupEntry> out;
  each_entry<struct group>(group_path, fgetgrent_r, [&](const struct group& gr) {
    if (name_is(gr.gr_name, name) || (gid && gr.gr_gid == *gid)) out = group_of(gr);
    return out.has_value();
  });
  return out;
}

std::vector<gid_t> groups_of(const char* group_path, const std::string& user, gid_t gid) {
  std::vector<gid_t> groups{gid};
  each_entry<struct group>(group_path, fgetgrent_r, [&](const struct group& gr) {
    if (std::find(groups.begin(), groups.end(), gr.gr_gid) != groups.end()) return false;
    for (char** m = gr.gr_mem; m && *m; ++m) {
      if (user == *m) {
        groups.push_back(gr.gr_gid);
        break;
      }
    }
    return false;
  });
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

// One entry through NSS: lookup(entry, buffer, size, &found) is a
// getpw*_r or getgr*_r call; `size_hint` its sysconf name.
template <typename Entry, typename Out, typename Lookup>
std::optional<Out> ask_nss(int size_hint, Out (*convert)(const Entry&), Lookup lookup) {
  long hint = sysconf(size_hint);
  std::vector<char> buffer(hint > 0 ? static_cast<size_t>(hint) : 4096);
  Entry entry{};
  Entry* found = nullptr;
  if (!read_entry(buffer, entry, found, lookup)) return std::nullopt;
  return convert(*found);
}

}  // namespace

std::optional<Account> account_named(std::string_view name) {
  std::string key(name);
  return ask_nss<passwd>(_SC_GETPW_R_SIZE_MAX, account_of, [&](passwd* e, char* b, size_t n, passwd** r) {
    return getpwnam_r(key.c_str(), e, b, n, r);
  });
}

std::optional<Account> account_with_uid(uid_t uid) {
  return ask_nss<passwd>(_SC_GETPW_R_SIZE_MAX, account_of, [&](passwd* e, char* b, size_t n, passwd** r) {
    return getpwuid_r(uid, e, b, n, r);
  });
}

std::optional<GroupEntry> group_named(std::string_view name) {
  std::string key(name);
  return ask_nss<group>(_SC_GETGR_R_SIZE_MAX, group_of, [&](group* e, char* b, size_t n, group** r) {
    return getgrnam_r(key.c_str(), e, b, n, r);
  });
}

std::optional<GroupEntry> group_with_gid(gid_t gid) {
  return ask_nss<group>(_SC_GETGR_R_SIZE_MAX, group_of, [&](group* e, char* b, size_t n, group** r) {
    return getgrgid_r(gid, e, b, n, r);
  });
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
