// pty/namespaces: an isolated session's namespaces and file system view,
// built from the kernel's own pieces (no bubblewrap, no setuid helper).
//
// A session is held by one process, its holder: the first process (PID 1)
// of a new pid namespace, with new mount, ipc and uts namespaces (and a new
// network namespace unless the network is shared). Between its clone and exec
// it builds the session's root from the host's (pty/namespaces.cc: the
// plan), pivots into it, gives up every capability and execs execd itself
// as a tiny init (`execd --isolated-init`, holder_main) that reaps what the
// session orphans and, for uid_mode userns, makes the session's user
// namespace (mapping the session's uid and gid to execd's own). The holder's
// namespaces are the session: runs enter them (pty/confine), file routes
// enter its mount namespace on a pool thread (MountScope), and killing the
// holder ends every process in it (the kernel kills a pid namespace with
// its PID 1).
//
// The session's root: the host's root read-only (nosuid), its view chosen
// by RootView below; over it a fresh /proc with its system-wide knobs
// (/proc/sys and the like) read-only, a /dev with the usual devices, a new
// devpts and /dev/shm, /run and /root as tmpfs, /tmp as tmpfs (profile
// strict) or the host's /tmp (balanced), then the session's own mounts
// shallow-first: overlays (lower: the host path, upper and work: a
// directory of execd's, or a tmpfs for persist=false), read-write and
// read-only binds; last, execd's state directory hidden under an empty
// tmpfs and its secret files (token files) under an empty unreadable file.
//
// Why a view at all: a session's processes are uid 0 (or take the uid they
// are given) without capabilities, and the kernel's owner checks still
// pass for uid 0 on every file the host's root owns. RootView::idmapped
// takes that away: the root and each host mount below it that allows it are
// ID-mapped mounts whose mapping leaves uid and gid 0 out (every other id
// maps to itself), so the host's root-owned files show as the overflow ids
// (nobody/nogroup) and only their "other" bits count, for uid 0 in the
// session as for anyone. Mounts whose file system cannot be ID-mapped
// (sysfs, cgroup, and whatever a kernel refuses, overlayfs in 6.x) are
// bound as they are, read-only. RootView::masked, where the root itself
// cannot be ID-mapped (an overlayfs root, an old kernel): the root as it is
// plus a fixed list of paths covered (kMaskedPaths, /etc/ssh's keys).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pty/confine.h"

namespace execd::pty {

class ChildSetup;

struct SessionMount {
  enum class Kind { bind_rw, bind_ro, overlay, overlay_tmpfs };
  Kind kind = Kind::bind_rw;
  std::string source;      // host path (an overlay's lower)
  std::string target;      // inside the session
  std::string upper, work; // overlay: host directories; overlay_tmpfs: the tmpfs's mount point
  bool create_target = false;  // target lies in a tmpfs of the session: made (a file if source is one)
  bool source_is_file = false;
  // overlay_tmpfs: the upper's owner and mode (the merged root shows them:
  // the lower's, so the session's user may write where it could before).
  uid_t upper_uid = 0;
  gid_t upper_gid = 0;
  mode_t upper_mode = 0755;
};

enum class RootView { idmapped, masked };
const char* root_view_name(RootView v);

// What RootView::masked covers besides execd's own files: host files whose
// mode keeps them from everyone but root (a file is covered by an empty
// unreadable file, a directory by an empty tmpfs). /etc/ssh's host keys are
// added by a glob at each session.
extern const char* const kMaskedPaths[];

struct SessionPlan {
  std::string staging;                 // an empty host directory the new root is built on
  std::vector<SessionMount> mounts;    // applied in this order (the caller sorts shallow-first)
  bool tmp_tmpfs = true;               // profile strict: a private /tmp; balanced: the host's
  bool share_net = true;
  std::vector<std::string> hide;       // host directories covered by an empty read-only tmpfs
  std::vector<std::string> mask_files; // host files covered by `mask_source` (read-only)
  std::string mask_source;             // an empty host file of mode 0000
  RootView root_view = RootView::masked;
  int idmap_userns = -1;               // idmapped: the mapping's user namespace (the probe's)
  // idmapped: the host's mount points below / that the session sees, in
  // tree order (a parent before what is mounted below it).
  std::vector<std::string> host_mounts;
  bool refuse_namespaces = false;      // the holder and every run get pty::session_filter
  std::string hostname = "sandbox";
  std::optional<std::pair<uint32_t, uint32_t>> userns;  // uid_mode userns: the ids inside
};

// The host's mount points that a session's view rebuilds (idmapped): every
// mount below / but those beneath `skip` (what the session replaces or
// hides), one per path, in tree order. From execd's own /proc/self/mountinfo.
std::vector<std::string> host_mount_points(const std::vector<std::string>& skip);
// What a session replaces with its own mounts, whatever its plan.
extern const char* const kReplacedPaths[];

struct Holder {
  pid_t pid = -1;
  int ready_fd = -1;  // read end: "ok\n", or "error: ...\n", then EOF
};

// Starts a holder for `plan`. Blocks the calling (loop) thread until the
// holder has built the root and exec'd (a few milliseconds), or failed, or
// was given up on (stopped or traced before its exec, or past the cap of
// pty/vm_child: killed, ETIMEDOUT). 0, or an errno with `error` naming the
// step.
int start_holder(const SessionPlan& plan, const ChildSetup& setup, Holder& out, std::string& error);

// `execd --isolated-init [--userns UID GID]`: the holder after its exec.
// main calls it before anything else; it never returns.
bool is_holder_invocation(int argc, char** argv);
[[noreturn]] void holder_main(int argc, char** argv);

// Opens the holder's namespaces for runs to enter. False with `error`.
bool open_namespaces(pid_t holder, bool own_net, bool userns, IsolatedEntry& out, std::string& error);
void close_namespaces(IsolatedEntry& entry);

// What this kernel, in this process, allows (a real trial, not a guess):
// namespaces and mounts, an overlay whose upper lives in `scratch_dir`, a
// user namespace, switching uid. Blocks for a few milliseconds.
// `root_view`: nullopt tries idmapped and falls back to masked; a value is
// that view or, for idmapped, isolation unavailable if it cannot be had.
struct IsolationProbe {
  bool available = false;
  bool overlay = false;        // an overlay with its upper in the scratch directory
  bool userns = false;
  bool setpriv = false;        // runs may take another uid (CAP_SETUID)
  std::string message;         // why not, or what is missing
  std::string kernel;          // uname release
  RootView root_view = RootView::masked;
  std::string root_view_message;        // what the view means here, or why it is masked
  std::vector<std::string> not_idmapped;  // idmapped: host mounts seen as they are (read-only)
  int idmap_userns = -1;                // idmapped: the mapping's user namespace, open for execd's life
  bool refuses_namespaces = false;      // pty::session_filter works here
  std::string namespaces_message;
};
IsolationProbe probe_isolation(const std::string& scratch_dir, std::optional<RootView> root_view,
                               const std::vector<std::string>& skip);

// An isolated session's mount namespace, held open for whoever works in it.
struct MountNamespace {
  explicit MountNamespace(int f) : fd(f) {}
  ~MountNamespace();
  MountNamespace(const MountNamespace&) = delete;
  MountNamespace& operator=(const MountNamespace&) = delete;
  int fd;
};

// A pool thread inside a session's mount namespace for the length of one
// piece of file work: paths resolve as the session sees them (its overlay,
// its binds, its symlinks). The thread gets its own fs_struct once
// (unshare CLONE_FS) and comes back to execd's namespace, root and working
// directory at the end of the scope; if it cannot, execd aborts rather than
// serve other requests from inside a session.
class MountScope {
 public:
  // On the loop at start-up: execd's own namespace, root and cwd.
  static void remember_home();
  explicit MountScope(int mnt_fd);  // -1: no-op
  // Null: no-op (work outside any session).
  explicit MountScope(const MountNamespace* ns) : MountScope(ns ? ns->fd : -1) {}
  ~MountScope();
  MountScope(const MountScope&) = delete;
  MountScope& operator=(const MountScope&) = delete;
  // 0, or the errno of entering (the work must not run then).
  int error() const { return error_; }

 private:
  bool entered_ = false;
  int error_ = 0;
};

}  // namespace execd::pty
