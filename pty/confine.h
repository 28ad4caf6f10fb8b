// pty/confine: the steps the spawn child takes besides pty/spawn's own, in
// one place so that spawn makes two calls: entering an isolated session's
// namespaces (pty/namespaces made them) and standing on the hardening floor
// (pty/hardening). Both run in the spawn child (on execd's memory until its
// exec, as a vfork child): async-signal-safe, no allocation, everything
// prepared by the parent.
//
//   parent: PidNamespaceScope   (the child is born in the session's pid ns)
//   child:  ... pty/spawn: process group, stdio, cgroup, oom score ...
//           confine_before_credentials   setns mnt, ipc, uts, net (then user);
//                                        capability bounding set
//           ... pty/spawn: setgroups/setgid/setuid, chdir, rlimits ...
//           confine_before_exec          capabilities, no_new_privs,
//                                        Landlock, seccomp (last)
//           execve
#pragma once

namespace execd::pty {

class Hardening;

// An isolated run: descriptors of its session's namespaces (the session
// keeps them open) and the session's own Landlock ruleset (-1: none).
struct IsolatedEntry {
  int mnt = -1, pid = -1, net = -1, ipc = -1, uts = -1;
  int user = -1;  // uid_mode userns: entered last, after the groups are cleared
  int landlock = -1;
  bool refuse_namespaces = false;  // pty::session_filter, when the floor's filter is off
};

// A process is born in the pid namespace its parent's thread has chosen for
// children: on the spawning thread, the session's for as long as this scope
// lives (the clone), then execd's own again.
class PidNamespaceScope {
 public:
  explicit PidNamespaceScope(const IsolatedEntry* entry);
  ~PidNamespaceScope();
  PidNamespaceScope(const PidNamespaceScope&) = delete;
  PidNamespaceScope& operator=(const PidNamespaceScope&) = delete;
  // 0, or the errno of the setns that failed.
  int error() const { return error_; }

 private:
  bool switched_ = false;
  int error_ = 0;
};

// Child side. Each returns nullptr, or the step that failed (errno set).
const char* confine_before_credentials(const IsolatedEntry* entry, const Hardening* hardening);
const char* confine_before_exec(const IsolatedEntry* entry, const Hardening* hardening);

}  // namespace execd::pty
