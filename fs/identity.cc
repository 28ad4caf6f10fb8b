// fs/identity: see header.
#include "fs/identity.h"

#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace execd::fs {
namespace {

// setfsuid/setfsgid return the previous value and never fail visibly; an
// invalid id (-1) changes nothing, which is how the current one is read.
uid_t set_fsuid(uid_t id) { return static_cast<uid_t>(syscall(SYS_setfsuid, id)); }
gid_t set_fsgid(gid_t id) { return static_cast<gid_t>(syscall(SYS_setfsgid, id)); }
uid_t current_fsuid() { return set_fsuid(static_cast<uid_t>(-1)); }
gid_t current_fsgid() { return set_fsgid(static_cast<gid_t>(-1)); }

// fs/ links no logger (the fuzz targets link fs/ alone): straight to stderr.
[[noreturn]] void refused(const char* what) {
  fprintf(stderr, "execd: the kernel refused %s on a file job's thread: stopping rather than working as the wrong user\n",
          what);
  std::abort();
}

}  // namespace

bool can_assume_identities() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  auto has = [&](int cap) { return (data[cap / 32].effective & (1u << (cap % 32))) != 0; };
  return has(CAP_SETUID) && has(CAP_SETGID);
}

bool is_own_identity(const Identity& id) { return id.uid == geteuid() && id.gid == getegid(); }

ThreadIdentity::ThreadIdentity(const Identity* id) {
  if (!id) return;
  active_ = true;
  long n = syscall(SYS_getgroups, 0, nullptr);
  if (n < 0) refused("getgroups");
  old_groups_.resize(static_cast<size_t>(n));
  if (n > 0 && syscall(SYS_getgroups, n, old_groups_.data()) != n) refused("getgroups");
  old_fsgid_ = current_fsgid();
  old_fsuid_ = current_fsuid();
  // Groups and gid while the thread is still privileged, the uid last.
  if (syscall(SYS_setgroups, 1, &id->gid) != 0) refused("setgroups");
  set_fsgid(id->gid);
  set_fsuid(id->uid);
  if (current_fsgid() != id->gid) refused("setfsgid");
  if (current_fsuid() != id->uid) refused("setfsuid");
}

ThreadIdentity::~ThreadIdentity() {
  if (!active_) return;
  // The uid first: it gives the thread back its file capabilities.
  set_fsuid(old_fsuid_);
  set_fsgid(old_fsgid_);
  if (syscall(SYS_setgroups, old_groups_.size(), old_groups_.data()) != 0) refused("setgroups (restore)");
  if (current_fsuid() != old_fsuid_ || current_fsgid() != old_fsgid_) refused("restoring the file identity");
}

}  // namespace execd::fs
