// fs/identity: file system work done as another user, per thread. The
// /v1/filesystem/{uid}/{gid} routes run their pool jobs with the thread's
// file system uid and gid, and its groups, set to that identity (raw
// setfsuid/setfsgid/setgroups system calls change only the calling thread;
// glibc's wrappers would change every thread of execd), so the kernel checks
// permissions and owns new files exactly as for that user. The thread is
// back to execd's own identity when the job ends.
#pragma once

#include <sys/types.h>

#include <vector>

namespace execd::fs {

struct Identity {
  uid_t uid = 0;
  gid_t gid = 0;
};

// Whether this process may take on any identity (CAP_SETUID and CAP_SETGID
// in its effective set); without them only its own uid and gid can be used.
bool can_assume_identities();
// Whether `id` is execd's own (then nothing needs to change).
bool is_own_identity(const Identity& id);

// For one job on one thread. Aborts if the kernel refuses a change that
// can_assume_identities() promised: file work must never run as the wrong
// user.
class ThreadIdentity {
 public:
  explicit ThreadIdentity(const Identity* id);
  ~ThreadIdentity();
  ThreadIdentity(const ThreadIdentity&) = delete;
  ThreadIdentity& operator=(const ThreadIdentity&) = delete;

 private:
  bool active_ = false;
  uid_t old_fsuid_ = 0;
  gid_t old_fsgid_ = 0;
  std::vector<gid_t> old_groups_;
};

}  // namespace execd::fs
