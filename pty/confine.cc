// pty/confine: see header.
#include "pty/confine.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>

#include "pty/hardening.h"

namespace execd::pty {

namespace {
// execd's own pid namespace, to come back to (opened on the loop thread at
// the first isolated spawn; never closed).
int own_pid_namespace() {
  static int fd = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
  return fd;
}
}  // namespace

PidNamespaceScope::PidNamespaceScope(const IsolatedEntry* entry) {
  if (!entry || entry->pid < 0) return;
  if (own_pid_namespace() < 0) {
    error_ = errno;
    return;
  }
  if (setns(entry->pid, CLONE_NEWPID) != 0) {
    error_ = errno;
    return;
  }
  switched_ = true;
}

PidNamespaceScope::~PidNamespaceScope() {
  // Back to execd's own: entering the namespace a thread lives in is always
  // allowed. If it were not, every later child would be born in a session:
  // better to stop.
  if (switched_ && setns(own_pid_namespace(), CLONE_NEWPID) != 0) abort();
}

const char* confine_before_credentials(const IsolatedEntry* entry, const Hardening* hardening) {
  if (entry) {
    if (!hardening) {
      errno = EINVAL;
      return "isolated run without a prepared hardening floor";
    }
    if (entry->mnt >= 0 && setns(entry->mnt, CLONE_NEWNS) != 0) return "enter the session's mount namespace";
    if (entry->ipc >= 0 && setns(entry->ipc, CLONE_NEWIPC) != 0) return "enter the session's ipc namespace";
    if (entry->uts >= 0 && setns(entry->uts, CLONE_NEWUTS) != 0) return "enter the session's uts namespace";
    if (entry->net >= 0 && setns(entry->net, CLONE_NEWNET) != 0) return "enter the session's network namespace";
    if (entry->user >= 0) {
      // Whatever execd's groups are, none of them follows into the session
      // (outside the map they would still count on the host).
      if (setgroups(0, nullptr) != 0) return "clear supplementary groups";
      if (setns(entry->user, CLONE_NEWUSER) != 0) return "enter the session's user namespace";
    }
    return hardening->child_before_credentials(true);
  }
  return hardening ? hardening->child_before_credentials(false) : nullptr;
}

const char* confine_before_exec(const IsolatedEntry* entry, const Hardening* hardening) {
  if (!hardening) return nullptr;
  return hardening->child_before_exec(entry != nullptr, entry ? entry->landlock : -1,
                                      entry && entry->refuse_namespaces);
}

}  // namespace execd::pty
