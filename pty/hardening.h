// pty/hardening: the floor every process execd starts stands on (commands,
// bash sessions, terminals, kernels, isolated runs), opt-in by flags:
//  * capabilities trimmed to the set a Docker container gets by default
//    (bounding, permitted, effective, inheritable; ambient cleared);
//  * no_new_privs, so setuid binaries and file capabilities grant nothing;
//  * a Landlock ruleset: writes only beneath a list of paths;
//  * a seccomp deny-list of syscalls ordinary work has no use for and that
//    attack the kernel, the host or the daemon (the list and its reasons are
//    in hardening.cc and docs/security.md).
// Prepared once at start-up (probing what the kernel allows, so the report
// says what is really enforced), then applied in the vfork child between
// fork and exec by pty/confine, which calls the two child-side steps below.
// A step that was found working at start-up and fails in a child fails the
// spawn: a process never runs below the floor it was promised.
#pragma once

#include <linux/filter.h>

#include <cstdint>
#include <string>
#include <vector>

namespace execd::pty {

// As upstream names them (OSEP-0018): "active" (enforced), "disabled" (not
// asked for), "degraded" (asked for, enforced in part; the message says
// what is missing), "unsupported" (this kernel or build cannot).
enum class LayerState { active, disabled, degraded, unsupported };
const char* layer_state_name(LayerState s);

struct LayerReport {
  LayerState state = LayerState::disabled;
  std::string message;
};

struct HardeningOptions {
  bool drop_caps = false;
  bool no_new_privs = false;  // implied by seccomp and landlock
  bool seccomp = false;
  bool landlock = false;
  std::vector<std::string> landlock_writable;  // empty: kDefaultLandlockWritable
};

// Where --landlock lets processes write when --landlock-writable is not given.
extern const char* const kDefaultLandlockWritable[];

// `fd`, moved above 3 if it is not (closing the old one): descriptors the
// spawn child uses after its own dup2 onto 0-3 must not be among those.
int above_child_stdio(int fd);

// The capabilities --drop-caps keeps: Docker's default set.
uint64_t docker_default_caps();

// The seccomp filter every process of an isolated session stands on, floor
// or no floor (the floor's own filter refuses all of this too): no new
// namespaces through clone or unshare (EPERM; a user namespace is the one a
// process without capabilities may make, and inside it every other one),
// clone3 answers ENOSYS so libc falls back to clone, and no kernel keyring
// calls (a session's uid 0 would share the host root's keyrings: they are
// keyed by uid, not namespaced). The machine's other calling convention
// (i386 on x86_64, arm on aarch64) is checked with its own numbers, so
// 32-bit programs still run. Built once by the first call (in the parent:
// the child only installs it).
const sock_fprog& session_filter();
// Child side: no_new_privs must be set. nullptr, or the failing step.
const char* install_session_filter();

class Hardening {
 public:
  Hardening() = default;
  ~Hardening();
  Hardening(const Hardening&) = delete;
  Hardening& operator=(const Hardening&) = delete;

  // Probes and builds; never fails (the reports say what is in force).
  // Called once, also with no layer asked for (isolated runs use the child
  // steps to drop every capability).
  void prepare(const HardeningOptions& options);

  LayerReport caps_report, nnp_report, seccomp_report, landlock_report;

  // Any layer on: the spawn path calls the child steps.
  bool any() const { return drop_caps_ || nnp_ || seccomp_ || landlock_fd_ >= 0; }
  bool landlock_on() const { return landlock_fd_ >= 0; }
  // A Landlock ruleset over `writable` (the configured paths when empty),
  // resolved in the calling thread's mount namespace: an isolated session
  // builds its own inside its namespace. -1 if Landlock is off or failed.
  int make_landlock_ruleset(const std::vector<std::string>& extra) const;

  // --- child side (the vfork child: no allocation, async-signal-safe) ---
  // Before credentials change (needs CAP_SETPCAP): ambient cleared, the
  // bounding set trimmed to `keep` (all caps when `drop_all`).
  const char* child_before_credentials(bool drop_all) const;
  // Right before exec: permitted/effective/inheritable trimmed, then
  // no_new_privs, Landlock (`landlock_fd` if >= 0, else the daemon's) and
  // seccomp, in that order (seccomp last: it may deny what the others use).
  // `isolated`: an isolated run (all capabilities go, no_new_privs always).
  // `refuse_namespaces`: an isolated run (or holder) of a session that
  // refuses new namespaces gets pty::session_filter, unless the floor's own
  // filter, which refuses all it does, is on.
  const char* child_before_exec(bool isolated, int landlock_fd, bool refuse_namespaces = false) const;

 private:
  bool drop_caps_ = false, can_drop_bounding_ = false, nnp_ = false, seccomp_ = false;
  uint64_t keep_caps_ = ~0ull;
  int cap_last_ = 40;
  uint64_t landlock_handled_ = 0;
  int landlock_abi_ = 0;
  int landlock_fd_ = -1;
  std::vector<std::string> landlock_paths_;
  std::vector<sock_filter> filter_;
  sock_fprog program_{};
};

}  // namespace execd::pty
