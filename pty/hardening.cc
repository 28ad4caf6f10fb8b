// pty/hardening: see header.
#include "pty/hardening.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "fs/small_file.h"
#include "pty/vm_child.h"

#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

namespace execd::pty {

namespace {

#if defined(__x86_64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_X86_64;
constexpr uint32_t kX32Bit = 0x40000000;  // x32 syscalls: same numbers with this bit
#elif defined(__aarch64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_AARCH64;
constexpr uint32_t kX32Bit = 0;
#else
#error "seccomp filter: unknown architecture"
#endif

// The deny-list. Each entry is something ordinary work (builds, tests,
// package installs, servers, debuggers) does not need and that reaches
// past the sandbox: the kernel itself, the host's global state, or the
// daemon. Denied calls fail with EPERM, as under Docker's default profile,
// so programs see an ordinary error rather than a kill.
const int kDeniedSyscalls[] = {
    // Loading code into the kernel, replacing it, rebooting the machine.
    SYS_init_module, SYS_finit_module, SYS_delete_module, SYS_kexec_load,
#ifdef SYS_kexec_file_load
    SYS_kexec_file_load,
#endif
    SYS_reboot,
    // Changing the mount tree: a process could re-mount over what execd
    // and the isolated sessions rely on (both old and new mount APIs).
    SYS_mount, SYS_umount2, SYS_pivot_root,
#ifdef SYS_open_tree
    SYS_open_tree, SYS_move_mount, SYS_fsopen, SYS_fsconfig, SYS_fsmount, SYS_fspick,
#endif
#ifdef SYS_mount_setattr
    SYS_mount_setattr,
#endif
    // Entering other namespaces (new ones are refused in clone/unshare
    // below): the way out of an isolated session, and into execd's own.
    SYS_setns,
    // Reading and rewriting another process's memory: a command could take
    // over a bash session, a terminal or a kernel of another client running
    // as the same user (debuggers and strace do not work under the floor).
    SYS_ptrace, SYS_process_vm_readv, SYS_process_vm_writev,
    // Large kernel attack surfaces most exploits start from, with little
    // use in a sandbox's workloads.
    SYS_bpf, SYS_perf_event_open, SYS_userfaultfd,
#ifdef SYS_io_uring_setup
    SYS_io_uring_setup, SYS_io_uring_enter, SYS_io_uring_register,
#endif
    // The kernel keyring is not namespaced: keys would be shared with the host.
    SYS_add_key, SYS_request_key, SYS_keyctl,
    // Opening files by handle bypasses path checks (the "shocker" escape).
    SYS_open_by_handle_at,
    // Host-wide state: accounting, swap, the kernel log, the clock, names,
    // raw I/O ports, quotas, the terminal hangup.
    SYS_acct, SYS_swapon, SYS_swapoff, SYS_syslog, SYS_settimeofday, SYS_clock_settime, SYS_clock_adjtime,
    SYS_sethostname, SYS_setdomainname,
#ifdef SYS_iopl
    SYS_iopl, SYS_ioperm,
#endif
    SYS_quotactl, SYS_vhangup,
#ifdef SYS_lookup_dcookie
    SYS_lookup_dcookie,
#endif
#ifdef SYS_uselib
    SYS_uselib,
#endif
};

// New namespaces through clone(2) and unshare(2).
constexpr uint32_t kCloneNewMask = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |
                                   CLONE_NEWPID | CLONE_NEWNET;
constexpr uint32_t kCloneNewTime = 0x00000080;  // CLONE_NEWTIME (unshare only)

constexpr uint32_t kRetAllow = SECCOMP_RET_ALLOW;
constexpr uint32_t kRetEperm = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
constexpr uint32_t kRetEnosys = SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA);

sock_filter stmt(uint16_t code, uint32_t k) { return BPF_STMT(code, k); }
sock_filter jump(uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) { return BPF_JUMP(code, k, jt, jf); }

constexpr uint32_t kNrOffset = offsetof(struct seccomp_data, nr);
constexpr uint32_t kArchOffset = offsetof(struct seccomp_data, arch);
// The low 32 bits of the first argument (the flags of clone and unshare).
constexpr uint32_t kArg0Offset = offsetof(struct seccomp_data, args[0])
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
                                 + 4
#endif
    ;

std::vector<sock_filter> build_filter() {
  std::vector<sock_filter> f;
  // Another architecture's calling convention (32-bit int 0x80) has other
  // numbers: refused whole, as is the x32 ABI.
  f.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, kArchOffset));
  f.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, kAuditArch, 1, 0));
  f.push_back(stmt(BPF_RET | BPF_K, kRetEperm));
  f.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, kNrOffset));
  if (kX32Bit) {
    f.push_back(jump(BPF_JMP | BPF_JGE | BPF_K, kX32Bit, 0, 1));
    f.push_back(stmt(BPF_RET | BPF_K, kRetEperm));
  }
  for (int nr : kDeniedSyscalls) {
    f.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1));
    f.push_back(stmt(BPF_RET | BPF_K, kRetEperm));
  }
  // clone3 passes its flags in memory a filter cannot read: ENOSYS makes
  // libc fall back to clone(2), whose flags it can (as Docker does).
#ifdef SYS_clone3
  f.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1));
  f.push_back(stmt(BPF_RET | BPF_K, kRetEnosys));
#endif
  for (auto [nr, mask] : {std::pair<int, uint32_t>{SYS_clone, kCloneNewMask},
                          std::pair<int, uint32_t>{SYS_unshare, kCloneNewMask | kCloneNewTime}}) {
    // Not this call: skip the load, the test, the refusal (and clone's allow).
    f.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, nr == SYS_clone ? 4 : 3));
    f.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, kArg0Offset));
    f.push_back(jump(BPF_JMP | BPF_JSET | BPF_K, mask, 0, 1));
    f.push_back(stmt(BPF_RET | BPF_K, kRetEperm));
    // Not a new namespace: allowed (the number in A is gone, so decide here).
    if (nr == SYS_clone) {
      f.push_back(stmt(BPF_RET | BPF_K, kRetAllow));
    }
  }
  f.push_back(stmt(BPF_RET | BPF_K, kRetAllow));
  return f;
}

// The session filter's checks for one calling convention, by that
// convention's numbers; every path returns.
struct SessionCalls {
  int clone, unshare, clone3, add_key, request_key, keyctl;
};

void session_checks(std::vector<sock_filter>& f, const SessionCalls& c, uint32_t x32_bit) {
  f.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, kNrOffset));
  // x32 numbers are x86_64's with a high bit: the same calls.
  if (x32_bit) f.push_back(stmt(BPF_ALU | BPF_AND | BPF_K, ~x32_bit));
  f.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(c.clone3), 0, 1));
  f.push_back(stmt(BPF_RET | BPF_K, kRetEnosys));
  for (int nr : {c.add_key, c.request_key, c.keyctl}) {
    f.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1));
    f.push_back(stmt(BPF_RET | BPF_K, kRetEperm));
  }
  for (auto [nr, mask] : {std::pair<int, uint32_t>{c.clone, kCloneNewMask},
                          std::pair<int, uint32_t>{c.unshare, kCloneNewMask | kCloneNewTime}}) {
    f.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 4));
    f.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, kArg0Offset));
    f.push_back(jump(BPF_JMP | BPF_JSET | BPF_K, mask, 0, 1));
    f.push_back(stmt(BPF_RET | BPF_K, kRetEperm));
    f.push_back(stmt(BPF_RET | BPF_K, kRetAllow));
  }
  f.push_back(stmt(BPF_RET | BPF_K, kRetAllow));
}

#if defined(__x86_64__)
constexpr uint32_t kCompatArch = AUDIT_ARCH_I386;
// arch/x86/entry/syscalls/syscall_32.tbl
constexpr SessionCalls kCompatCalls{120, 310, 435, 286, 287, 288};
#elif defined(__aarch64__)
constexpr uint32_t kCompatArch = AUDIT_ARCH_ARM;
// arch/arm/tools/syscall.tbl
constexpr SessionCalls kCompatCalls{120, 337, 435, 309, 310, 311};
#endif

std::vector<sock_filter> build_session_filter() {
#ifdef SYS_clone3
  const int clone3 = SYS_clone3;
#else
  const int clone3 = 435;
#endif
  std::vector<sock_filter> native, compat;
  session_checks(native, {SYS_clone, SYS_unshare, clone3, SYS_add_key, SYS_request_key, SYS_keyctl}, kX32Bit);
  session_checks(compat, kCompatCalls, 0);
  std::vector<sock_filter> f;
  f.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, kArchOffset));
  f.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, kAuditArch, 0, static_cast<uint8_t>(native.size())));
  f.insert(f.end(), native.begin(), native.end());
  // A still holds the architecture here.
  f.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, kCompatArch, 0, static_cast<uint8_t>(compat.size())));
  f.insert(f.end(), compat.begin(), compat.end());
  // No other convention reaches this kernel; refused if one did.
  f.push_back(stmt(BPF_RET | BPF_K, kRetEperm));
  return f;
}

int landlock_abi() {
  long v = syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return v < 0 ? -errno : static_cast<int>(v);
}

// Rights a rule for a file (not a directory) may carry.
constexpr uint64_t kFileRights = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_TRUNCATE |
                                 LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE;

}  // namespace

// Made at start-up, the ruleset would be descriptor 3, which a bash
// session's child overwrites with its status pipe before confining itself.
int above_child_stdio(int fd) {
  if (fd < 0 || fd > 3) return fd;
  int high = fcntl(fd, F_DUPFD_CLOEXEC, 10);
  if (high < 0) return fd;
  close(fd);
  return high;
}

namespace {

int build_ruleset(uint64_t handled, const std::vector<std::string>& paths, std::string* skipped) {
  struct landlock_ruleset_attr attr {};
  attr.handled_access_fs = handled;
  int fd = static_cast<int>(syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0));
  if (fd < 0) return -1;
  fd = above_child_stdio(fd);
  for (const std::string& p : paths) {
    int dir = open(p.c_str(), O_PATH | O_CLOEXEC);
    if (dir < 0) {
      if (skipped) *skipped += (skipped->empty() ? "" : ", ") + p;
      continue;
    }
    struct stat st {};
    fstat(dir, &st);
    struct landlock_path_beneath_attr rule {};
    rule.parent_fd = dir;
    rule.allowed_access = S_ISDIR(st.st_mode) ? handled : (handled & kFileRights);
    if (syscall(SYS_landlock_add_rule, fd, LANDLOCK_RULE_PATH_BENEATH, &rule, 0) != 0 && skipped)
      *skipped += (skipped->empty() ? "" : ", ") + p;
    close(dir);
  }
  return fd;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

// Runs the child steps in a forked child, as a spawn would: nullptr when
// they all worked, else the failing step and its errno. Called from main
// before any thread exists, so fork is safe.
const char* probe_in_child(const Hardening& h, int& err) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) {
    err = errno;
    return "pipe";
  }
  pid_t pid = fork();
  if (pid == 0) {
    const char* step = h.child_before_credentials(false);
    if (!step) step = h.child_before_exec(false, -1);
    int e = errno;
    struct {
      const char* step;
      int err;
    } r{step, e};
    if (write(p[1], &r, sizeof r) < 0) _exit(2);
    _exit(step ? 1 : 0);
  }
  close(p[1]);
  struct {
    const char* step;
    int err;
  } r{"fork", 0};
  if (pid < 0) {
    r.err = errno;
  } else {
    // Its answer (or its exit) within the bounds of every wait for a
    // child (pty/vm_child): one stopped at start-up is killed, not waited
    // for, and the layers it was to try are reported as refused.
    const int64_t start = monotonic_ms();
    bool answered = false;
    for (;;) {
      pollfd pfd{p[0], POLLIN, 0};
      if (poll(&pfd, 1, kHandOverLookMs) > 0) {
        answered = true;
        break;
      }
      char st = process_state(pid);
      if (st == 'T' || st == 't' || monotonic_ms() - start >= kHandOverCapMs) break;
    }
    if (!answered) {
      kill(pid, SIGKILL);
      r = {"probe child stopped or too slow (killed)", 0};
    } else if (read(p[0], &r, sizeof r) != sizeof r) {
      r = {"probe child died", 0};
    }
    // Exited, or SIGKILLed (which ends a stopped or traced one too).
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  close(p[0]);
  err = r.err;
  return r.step;
}

}  // namespace

const sock_fprog& session_filter() {
  static const std::vector<sock_filter> filter = build_session_filter();
  static const sock_fprog program{static_cast<unsigned short>(filter.size()),
                                  const_cast<sock_filter*>(filter.data())};
  return program;
}

const char* install_session_filter() {
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &session_filter(), 0, 0) != 0)
    return "seccomp filter of the isolated session";
  return nullptr;
}

const char* const kDefaultLandlockWritable[] = {"/tmp", "/var/tmp", "/dev", "/proc", "/run",
                                                "/workspace", "/home", "/root", nullptr};

uint64_t docker_default_caps() {
  const int caps[] = {CAP_CHOWN,  CAP_DAC_OVERRIDE, CAP_FOWNER,           CAP_FSETID, CAP_KILL,
                      CAP_SETGID, CAP_SETUID,       CAP_SETPCAP,          CAP_NET_BIND_SERVICE,
                      CAP_NET_RAW, CAP_SYS_CHROOT,  CAP_MKNOD,            CAP_AUDIT_WRITE, CAP_SETFCAP};
  uint64_t m = 0;
  for (int c : caps) m |= 1ull << c;
  return m;
}

const char* layer_state_name(LayerState s) {
  switch (s) {
    case LayerState::active:
      return "active";
    case LayerState::disabled:
      return "disabled";
    case LayerState::degraded:
      return "degraded";
    case LayerState::unsupported:
      return "unsupported";
  }
  return "disabled";
}

Hardening::~Hardening() {
  if (landlock_fd_ >= 0) close(landlock_fd_);
}

void Hardening::prepare(const HardeningOptions& o) {
  if (auto last = fs::read_small_file("/proc/sys/kernel/cap_last_cap", 64)) cap_last_ = atoi(last->c_str());
  if (cap_last_ <= 0 || cap_last_ > 63) cap_last_ = 40;
  caps_report = {LayerState::disabled, "not asked for (--drop-caps)"};
  nnp_report = {LayerState::disabled, "not asked for (--no-new-privs)"};
  seccomp_report = {LayerState::disabled, "not asked for (--seccomp)"};
  landlock_report = {LayerState::disabled, "not asked for (--landlock)"};

  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  bool have_setpcap = syscall(SYS_capget, &hdr, data) == 0 && (data[0].effective & (1u << CAP_SETPCAP));
  can_drop_bounding_ = have_setpcap;
  if (o.drop_caps) {
    drop_caps_ = true;
    keep_caps_ = docker_default_caps();
    caps_report = can_drop_bounding_
                      ? LayerReport{LayerState::active,
                                    "capabilities trimmed to Docker's default set (chown, dac_override, fowner, "
                                    "fsetid, kill, setgid, setuid, setpcap, net_bind_service, net_raw, sys_chroot, "
                                    "mknod, audit_write, setfcap)"}
                      : LayerReport{LayerState::degraded,
                                    "permitted and effective sets trimmed, but the bounding set is unchanged: "
                                    "execd lacks CAP_SETPCAP"};
  }
  if (o.no_new_privs || o.seccomp || o.landlock) {
    nnp_ = true;
    nnp_report = {LayerState::active, o.no_new_privs ? "set on every process"
                                                     : "set on every process (implied by --seccomp or --landlock)"};
  }
  if (o.seccomp) {
    filter_ = build_filter();
    program_.len = static_cast<unsigned short>(filter_.size());
    program_.filter = filter_.data();
    seccomp_ = true;
    seccomp_report = {LayerState::active,
                      "deny-list of " + std::to_string(std::size(kDeniedSyscalls)) +
                          " syscalls plus new namespaces in clone/unshare (EPERM) and clone3 (ENOSYS)"};
  }
  if (o.landlock) {
    int abi = landlock_abi();
    landlock_abi_ = abi;
    if (abi == -ENOSYS) {
      landlock_report = {LayerState::unsupported, "this kernel has no Landlock (ENOSYS)"};
    } else if (abi < 0) {
      landlock_report = {LayerState::unsupported,
                         std::string("Landlock is not enabled in this kernel (") + strerror(-abi) + ")"};
    } else {
      landlock_handled_ = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                          LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR |
                          LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_FIFO |
                          LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
      if (abi >= 2) landlock_handled_ |= LANDLOCK_ACCESS_FS_REFER;
      if (abi >= 3) landlock_handled_ |= LANDLOCK_ACCESS_FS_TRUNCATE;
      if (o.landlock_writable.empty()) {
        for (const char* const* p = kDefaultLandlockWritable; *p; ++p) landlock_paths_.emplace_back(*p);
      } else {
        landlock_paths_ = o.landlock_writable;
      }
      std::string skipped;
      landlock_fd_ = build_ruleset(landlock_handled_, landlock_paths_, &skipped);
      if (landlock_fd_ < 0) {
        landlock_report = {LayerState::unsupported, std::string("cannot create a ruleset: ") + strerror(errno)};
      } else {
        std::string msg = "writes only beneath " + join(landlock_paths_, ", ") + " (Landlock ABI " +
                          std::to_string(abi) + ")";
        if (!skipped.empty()) msg += "; not present, so not writable: " + skipped;
        LayerState st = LayerState::active;
        if (abi < 3) {
          st = LayerState::degraded;
          msg += abi < 2 ? "; ABI 1: truncate(2) is not confined and renames across directories are refused"
                         : "; ABI 2: truncate(2) is not confined";
        }
        landlock_report = {st, msg};
      }
    }
  }
  if (!any()) return;
  // What the kernel says when it is really done (a seccomp profile around
  // execd may refuse prctl or landlock_restrict_self).
  int err = 0;
  const char* failed = probe_in_child(*this, err);
  if (!failed) return;
  std::string why = std::string(failed) + ": " + strerror(err);
  if (seccomp_ && strstr(failed, "seccomp")) {
    seccomp_ = false;
    seccomp_report = {LayerState::unsupported, "the kernel refused the filter (" + why + ")"};
  } else if (landlock_fd_ >= 0 && strstr(failed, "landlock")) {
    close(landlock_fd_);
    landlock_fd_ = -1;
    landlock_report = {LayerState::unsupported, "the kernel refused the ruleset (" + why + ")"};
  } else if (drop_caps_ && strstr(failed, "capab")) {
    can_drop_bounding_ = false;
    caps_report = {LayerState::degraded, "the bounding set cannot be changed here (" + why + ")"};
  } else if (nnp_ && strstr(failed, "no_new_privs")) {
    nnp_ = false;
    nnp_report = {LayerState::unsupported, why};
  }
  // One more round: what is left must work, else it is off and says so.
  if (any() && (failed = probe_in_child(*this, err))) {
    why = std::string(failed) + ": " + strerror(err);
    for (LayerReport* r : {&caps_report, &nnp_report, &seccomp_report, &landlock_report})
      if (r->state == LayerState::active || r->state == LayerState::degraded) *r = {LayerState::unsupported, why};
    drop_caps_ = nnp_ = seccomp_ = false;
    if (landlock_fd_ >= 0) close(landlock_fd_);
    landlock_fd_ = -1;
  }
}

int Hardening::make_landlock_ruleset(const std::vector<std::string>& extra) const {
  if (landlock_fd_ < 0) return -1;
  std::vector<std::string> paths = landlock_paths_;
  paths.insert(paths.end(), extra.begin(), extra.end());
  return build_ruleset(landlock_handled_, paths, nullptr);
}

const char* Hardening::child_before_credentials(bool drop_all) const {
  if (!drop_all && !drop_caps_) return nullptr;
  // Ambient capabilities would survive exec: none.
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  if (!drop_all && !can_drop_bounding_) return nullptr;
  uint64_t keep = drop_all ? 0 : keep_caps_;
  for (int c = 0; c <= cap_last_; ++c) {
    if (keep & (1ull << c)) continue;
    if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno != EINVAL) return "drop capabilities from the bounding set";
  }
  return nullptr;
}

const char* Hardening::child_before_exec(bool isolated, int landlock_fd, bool refuse_namespaces) const {
  if (isolated || drop_caps_) {
    uint64_t keep = isolated ? 0 : keep_caps_;
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &hdr, data) != 0) return "capget (trim capabilities)";
    for (int i = 0; i < 2; ++i) {
      uint32_t mask = static_cast<uint32_t>(keep >> (32 * i));
      data[i].effective &= mask;
      data[i].permitted &= mask;
      data[i].inheritable &= mask;
    }
    if (syscall(SYS_capset, &hdr, data) != 0) return "capset (trim capabilities)";
  }
  if ((isolated || nnp_) && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return "prctl no_new_privs";
  // An isolated run has its session's own ruleset (paths resolved in its
  // mount namespace) or none; every other process the daemon's.
  int ruleset = isolated ? landlock_fd : landlock_fd_;
  if (ruleset >= 0 && syscall(SYS_landlock_restrict_self, ruleset, 0) != 0) return "landlock_restrict_self";
  if (seccomp_ && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program_, 0, 0) != 0) return "seccomp filter";
  // The floor's filter refuses all the session's does, and more.
  if (isolated && refuse_namespaces && !seccomp_) return install_session_filter();
  return nullptr;
}

}  // namespace execd::pty
