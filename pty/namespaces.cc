// pty/namespaces: see header.
//
// The holder is started as every process execd starts, sharing execd's
// memory until its exec (pty/vm_child: the loop waits for that with a
// deadline, where vfork had none): this thread first takes a new pid
// namespace for its children (unshare CLONE_NEWPID affects only children,
// and is allowed in a threaded process), so the child is born as its PID 1;
// the thread goes back to execd's own right after. The child makes the
// other namespaces itself (mount, ipc, uts and network; the user namespace
// of uid_mode userns is made after its exec, where mapping execd's uid 0
// keeps CAP_SETFCAP out of the picture). Everything the child does is
// prepared here as a list of steps over strings that outlive it; the child
// only makes system calls.
#include "pty/namespaces.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "fs/small_file.h"
#include "pty/hardening.h"
#include "pty/spawn.h"
#include "pty/vm_child.h"

// The locals read by the child are set before it starts and never changed
// after, which is what -Wclobbered cannot see.
#pragma GCC diagnostic ignored "-Wclobbered"

namespace execd::pty {

namespace {

// --- the steps the holder's child runs before its exec ------------------

struct Step {
  enum class Op : uint8_t { mount, read_only, mkdir, touch, symlink, own, view };
  Op op;
  const char* a = nullptr;  // mount, view: source; symlink: link target
  const char* b = nullptr;  // mount/read_only/mkdir/touch/view: target; symlink: link path
  const char* fstype = nullptr;
  const char* data = nullptr;
  unsigned long flags = 0;
  // ENOENT or EACCES is fine: a path that is not there, or that nobody in
  // the session could reach either (below a directory of the host root's,
  // which the ID-mapped view makes nobody's, execd's own steps included).
  bool tolerate_missing = false;
  uid_t uid = 0;                  // own: chown and chmod
  gid_t gid = 0;
  mode_t mode = 0;
  bool recursive = true;          // read_only: what is mounted below the target too
  // view: a read-only (nosuid) copy of the host mount at `a`, alone and
  // ID-mapped, or, where its file system refuses a mapping (or !idmap), with
  // everything mounted below it and as it is; then the `skip` steps that
  // follow (the views of what is below it) are already done.
  bool idmap = false;
  bool required = false;  // view: no fallback, the mapping must take
  size_t skip = 0;
};

// Strings with stable addresses for the steps, and the steps.
struct Plan {
  std::deque<std::string> text;
  std::vector<Step> steps;
  const char* keep(std::string s) { return text.emplace_back(std::move(s)).c_str(); }
  void add(Step s) { steps.push_back(s); }
};

struct HolderFailure {
  volatile int err = 0;
  const char* volatile step = nullptr;
  const char* volatile path = nullptr;
};

int do_step(const Step& s) {
  switch (s.op) {
    case Step::Op::mount:
      return mount(s.a, s.b, s.fstype, s.flags, s.data);
    case Step::Op::read_only: {
      struct mount_attr attr {};
      attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID;
      return static_cast<int>(syscall(SYS_mount_setattr, AT_FDCWD, s.b, static_cast<unsigned>(s.recursive ? AT_RECURSIVE : 0),
                                      &attr, sizeof attr));
    }
    case Step::Op::mkdir:
      return mkdir(s.b, 0755) == 0 || errno == EEXIST ? 0 : -1;
    case Step::Op::touch: {
      int fd = open(s.b, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
      if (fd < 0) return -1;
      close(fd);
      return 0;
    }
    case Step::Op::symlink:
      return symlink(s.a, s.b) == 0 || errno == EEXIST ? 0 : -1;
    case Step::Op::own:
      return chown(s.b, s.uid, s.gid) == 0 && chmod(s.b, s.mode) == 0 ? 0 : -1;
    case Step::Op::view:
      return -1;  // run by the step loop (it may skip what follows)
  }
  return 0;
}

// A view step (see Step): 0 as asked, 1 cloned whole as it is (the mapping
// was refused), 2 left out with what is below it (an unbindable mount,
// which a recursive bind leaves out too), -1 with errno.
int view_mount(const Step& s, int userns) {
  const unsigned clone = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC;
  int fd = static_cast<int>(syscall(SYS_open_tree, AT_FDCWD, s.a, clone | (s.idmap ? 0u : unsigned{AT_RECURSIVE})));
  if (fd < 0) return errno == EINVAL && !s.required ? 2 : -1;
  struct mount_attr attr {};
  attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID;
  int result = 0;
  if (s.idmap) {
    struct mount_attr mapped = attr;
    mapped.attr_set |= MOUNT_ATTR_IDMAP;
    mapped.userns_fd = static_cast<uint64_t>(userns);
    if (syscall(SYS_mount_setattr, fd, "", static_cast<unsigned>(AT_EMPTY_PATH), &mapped, sizeof mapped) != 0) {
      int e = errno;
      close(fd);
      errno = e;
      if (s.required) return -1;
      fd = static_cast<int>(syscall(SYS_open_tree, AT_FDCWD, s.a, clone | unsigned{AT_RECURSIVE}));
      if (fd < 0) return -1;
      result = 1;
    }
  }
  if ((!s.idmap || result == 1) &&
      syscall(SYS_mount_setattr, fd, "", static_cast<unsigned>(AT_EMPTY_PATH | AT_RECURSIVE), &attr, sizeof attr) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  if (syscall(SYS_move_mount, fd, "", AT_FDCWD, s.b, static_cast<unsigned>(MOVE_MOUNT_F_EMPTY_PATH)) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  close(fd);
  return result;
}

const char* step_name(const Step& s) {
  switch (s.op) {
    case Step::Op::mount:
      return s.fstype ? s.fstype : "bind mount";
    case Step::Op::read_only:
      return "make read-only";
    case Step::Op::mkdir:
      return "mkdir";
    case Step::Op::touch:
      return "create mount point";
    case Step::Op::symlink:
      return "symlink";
    case Step::Op::own:
      return "chown";
    case Step::Op::view:
      return s.idmap ? "ID-mapped view of the host mount" : "view of the host mount";
  }
  return "step";
}

void bring_loopback_up() {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return;
  struct ifreq ifr {};
  memcpy(ifr.ifr_name, "lo", 3);
  if (ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    ioctl(s, SIOCSIFFLAGS, &ifr);
  }
  close(s);
}

// execd's own binary, to exec as the holder's init whatever the session's
// root holds (opened on the loop thread at the first session).
int own_executable() {
  static int fd = open("/proc/self/exe", O_PATH | O_CLOEXEC);
  return fd;
}

int home_pid_namespace() {
  static int fd = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
  return fd;
}

// This thread's children are born in a new pid namespace while it lives.
class NewPidNamespaceForChildren {
 public:
  NewPidNamespaceForChildren() {
    if (home_pid_namespace() < 0) {
      error_ = errno;
      return;
    }
    if (unshare(CLONE_NEWPID) != 0) {
      error_ = errno;
      return;
    }
    switched_ = true;
  }
  ~NewPidNamespaceForChildren() {
    if (switched_ && setns(home_pid_namespace(), CLONE_NEWPID) != 0) abort();  // see PidNamespaceScope
  }
  int error() const { return error_; }

 private:
  bool switched_ = false;
  int error_ = 0;
};

std::string join_path(const std::string& root, const std::string& inside) {
  return inside == "/" ? root : root + inside;
}

bool overlay_safe(const std::string& p) { return p.find_first_of(",:\\\n") == std::string::npos; }

// The steps that make `plan.staging` the session's root.
bool build_steps(const SessionPlan& plan, Plan& out, std::string& error) {
  const std::string& R = plan.staging;
  auto M = [&](const std::string& src, const std::string& dst, const char* fstype, unsigned long flags,
               const std::string& data, bool tolerate_missing = false) {
    Step s{Step::Op::mount};
    s.a = src.empty() ? nullptr : out.keep(src);
    s.b = out.keep(dst);
    s.fstype = fstype;
    s.flags = flags;
    s.data = data.empty() ? nullptr : out.keep(data);
    s.tolerate_missing = tolerate_missing;
    out.add(s);
  };
  auto RO = [&](const std::string& dst) {
    Step s{Step::Op::read_only};
    s.b = out.keep(dst);
    out.add(s);
  };
  auto MK = [&](Step::Op op, const std::string& path, const std::string& target = {}) {
    Step s{op};
    s.b = out.keep(path);
    if (!target.empty()) s.a = out.keep(target);
    out.add(s);
  };
  // Nothing of what follows propagates back to the host.
  M("", "/", nullptr, MS_REC | MS_PRIVATE, "");
  bool root_overlay = false;
  for (const SessionMount& m : plan.mounts) root_overlay |= m.target == "/";
  // The host's root, read-only and without setuid (see RootView).
  auto view = [&](const std::string& src, const std::string& dst, bool idmap, bool required, size_t skip) {
    Step s{Step::Op::view};
    s.a = out.keep(src);
    s.b = out.keep(dst);
    s.idmap = idmap;
    s.required = required;
    s.tolerate_missing = !required;
    s.skip = skip;
    out.add(s);
  };
  if (plan.root_view == RootView::idmapped) {
    view("/", R, true, true, 0);
    const auto& hm = plan.host_mounts;
    for (size_t i = 0; i < hm.size(); ++i) {
      size_t below = 0;
      while (i + 1 + below < hm.size() && hm[i + 1 + below].compare(0, hm[i].size() + 1, hm[i] + "/") == 0) ++below;
      view(hm[i], R + hm[i], true, false, below);
    }
  } else {
    view("/", R, false, true, 0);
  }
  // Mounts in order; a root overlay first (it covers the bound root, so
  // /sys comes back over it; /dev, /proc, /tmp and /run follow anyway).
  std::vector<const SessionMount*> order;
  for (const SessionMount& m : plan.mounts)
    if (m.target == "/") order.insert(order.begin(), &m);
    else order.push_back(&m);
  bool system_done = false;
  auto system_mounts = [&] {
    system_done = true;
    if (root_overlay) {
      M("/sys", R + "/sys", nullptr, MS_BIND | MS_REC, "");
      RO(R + "/sys");
    }
    // /dev: the usual devices from the host, a private devpts and /dev/shm.
    M("tmpfs", R + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=1m");
    for (const char* dev : {"null", "zero", "full", "random", "urandom", "tty"}) {
      MK(Step::Op::touch, R + "/dev/" + dev);
      M(std::string("/dev/") + dev, R + "/dev/" + dev, nullptr, MS_BIND, "");
    }
    MK(Step::Op::mkdir, R + "/dev/pts");
    MK(Step::Op::mkdir, R + "/dev/shm");
    M("devpts", R + "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620");
    M("tmpfs", R + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
    MK(Step::Op::symlink, R + "/dev/ptmx", "pts/ptmx");
    MK(Step::Op::symlink, R + "/dev/fd", "/proc/self/fd");
    MK(Step::Op::symlink, R + "/dev/stdin", "/proc/self/fd/0");
    MK(Step::Op::symlink, R + "/dev/stdout", "/proc/self/fd/1");
    MK(Step::Op::symlink, R + "/dev/stderr", "/proc/self/fd/2");
    // The session's own processes only. The kernel lets uid 0 write what
    // procfs gives root by mode alone, capabilities or not: /proc/sys
    // (core_pattern names a program the kernel runs as the host's root),
    // the sysrq trigger, interrupt affinities, bus and driver knobs. Those
    // are read-only, as in a container; /proc/sys/user is not: its limits
    // ask for CAP_SYS_RESOURCE whatever the uid, and a uid_mode userns
    // holder sets its namespace's there (no user namespace below it). It is
    // a mount of its own below /proc/sys, which alone is made read-only.
    M("proc", R + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "");
    for (const char* knob : {"sys", "sysrq-trigger", "irq", "bus", "fs", "acpi", "scsi", "driver"}) {
      std::string at = R + "/proc/" + knob;
      M(at, at, nullptr, MS_BIND, "", true);
      if (at == R + "/proc/sys") M(at + "/user", at + "/user", nullptr, MS_BIND, "", true);
      Step ro{Step::Op::read_only};
      ro.b = out.keep(at);
      ro.tolerate_missing = true;
      ro.recursive = false;
      out.add(ro);
    }
    if (plan.tmp_tmpfs) M("tmpfs", R + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
    else M("/tmp", R + "/tmp", nullptr, MS_BIND | MS_REC, "");
    M("tmpfs", R + "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
    // Root's home is root's alone on the host: the session gets its own.
    M("tmpfs", R + "/root", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700");
  };
  for (const SessionMount* m : order) {
    if (!system_done && m->target != "/") system_mounts();
    std::string dst = join_path(R, m->target);
    if (m->create_target) {
      // In a tmpfs of the session: every missing level, then the point itself.
      std::string cur = R;
      size_t at = 1;
      while (at < m->target.size()) {
        size_t slash = m->target.find('/', at);
        if (slash == std::string::npos) break;
        cur = R + m->target.substr(0, slash);
        MK(Step::Op::mkdir, cur);
        at = slash + 1;
      }
      MK(m->source_is_file ? Step::Op::touch : Step::Op::mkdir, dst);
    }
    switch (m->kind) {
      case SessionMount::Kind::bind_rw:
        M(m->source, dst, nullptr, MS_BIND | MS_REC, "");
        break;
      case SessionMount::Kind::bind_ro:
        M(m->source, dst, nullptr, MS_BIND | MS_REC, "");
        RO(dst);
        break;
      case SessionMount::Kind::overlay:
      case SessionMount::Kind::overlay_tmpfs: {
        std::string upper = m->upper, work = m->work;
        if (m->kind == SessionMount::Kind::overlay_tmpfs) {
          // A tmpfs only this mount namespace sees (the propagation is private).
          M("tmpfs", m->upper, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
          upper = m->upper + "/upper";
          work = m->upper + "/work";
          MK(Step::Op::mkdir, upper);
          MK(Step::Op::mkdir, work);
          Step own{Step::Op::own};
          own.b = out.keep(upper);
          own.uid = m->upper_uid;
          own.gid = m->upper_gid;
          own.mode = m->upper_mode;
          out.add(own);
        }
        if (!overlay_safe(m->source) || !overlay_safe(upper) || !overlay_safe(work)) {
          error = "an overlay path may not contain ',', ':', '\\' or a newline: " + m->source;
          return false;
        }
        M("overlay", dst, "overlay", 0, "lowerdir=" + m->source + ",upperdir=" + upper + ",workdir=" + work);
        break;
      }
    }
  }
  if (!system_done) system_mounts();
  // Last, so that no session mount uncovers them: execd's state directory
  // and its secret files.
  for (const std::string& h : plan.hide)
    M("tmpfs", join_path(R, h), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0000,size=4k", true);
  for (const std::string& f : plan.mask_files) {
    std::string at = join_path(R, f);
    M(plan.mask_source, at, nullptr, MS_BIND, "", true);
    Step ro{Step::Op::read_only};
    ro.b = out.keep(at);
    ro.tolerate_missing = true;
    out.add(ro);
  }
  return true;
}

// What the holder's child reads: everything prepared before its clone.
struct HolderChild {
  const char* staging;
  const char* hostname;
  size_t hostname_len;
  bool new_net;
  bool make_userns;
  bool refuse_namespaces;  // pty::session_filter on the holder too
  int idmap_userns;        // RootView::idmapped: the mapping's user namespace
  int unshare_flags;
  int devnull;
  int ready_w;
  int exe;
  const Step* steps;
  size_t step_count;
  const Hardening* hardening;
  char* const* argv;
  char* const* envp;
  HolderFailure* failure;
};

[[noreturn]] void holder_child_fail(const HolderChild& c, const char* step, const char* path) {
  c.failure->err = errno;
  c.failure->path = path;
  c.failure->step = step;
  _exit(127);
}

// The holder before its exec, on execd's memory (pty/vm_child).
[[noreturn]] void holder_child(void* p) {
  const HolderChild& c = *static_cast<const HolderChild*>(p);
  // Its own session: signals to execd's process group do not reach it;
  // it dies with execd (the kernel then kills the whole session).
  if (setsid() < 0) holder_child_fail(c, "setsid", nullptr);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) holder_child_fail(c, "prctl PDEATHSIG", nullptr);
  if (dup2(c.devnull, 0) < 0 || dup2(c.devnull, 1) < 0 || dup2(c.ready_w, 3) < 0) holder_child_fail(c, "dup2", nullptr);
  if (unshare(c.unshare_flags) != 0)
    holder_child_fail(c, "unshare(CLONE_NEWNS|CLONE_NEWIPC|CLONE_NEWUTS|CLONE_NEWNET)", nullptr);
  for (size_t i = 0; i < c.step_count; ++i) {
    const Step& s = c.steps[i];
    int r = s.op == Step::Op::view ? view_mount(s, c.idmap_userns) : do_step(s);
    if (r == 1 || r == 2) i += s.skip;
    if (r < 0 && !(s.tolerate_missing && (errno == ENOENT || errno == EACCES))) holder_child_fail(c, step_name(s), s.b);
  }
  if (sethostname(c.hostname, c.hostname_len) != 0) holder_child_fail(c, "sethostname", nullptr);
  if (c.new_net) bring_loopback_up();
  if (chdir(c.staging) != 0) holder_child_fail(c, "chdir to the new root", c.staging);
  if (syscall(SYS_pivot_root, ".", ".") != 0) holder_child_fail(c, "pivot_root", c.staging);
  if (umount2(".", MNT_DETACH) != 0) holder_child_fail(c, "detach the old root", nullptr);
  if (chdir("/") != 0) holder_child_fail(c, "chdir /", nullptr);
  // The holder keeps nothing of root's powers. For uid_mode userns it
  // gives them up after its exec, once it has made the user namespace:
  // mapping execd's uid 0 needs CAP_SETFCAP when the namespace is made.
  if (!c.make_userns) {
    if (const char* step = c.hardening->child_before_credentials(true)) holder_child_fail(c, step, nullptr);
    if (const char* step = c.hardening->child_before_exec(true, -1, c.refuse_namespaces)) holder_child_fail(c, step, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  syscall(SYS_execveat, c.exe, "", c.argv, c.envp, AT_EMPTY_PATH);
  holder_child_fail(c, "exec execd as the session's init", nullptr);
}

}  // namespace

const char* root_view_name(RootView v) { return v == RootView::idmapped ? "idmapped" : "masked"; }

const char* const kMaskedPaths[] = {"/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", nullptr};
const char* const kReplacedPaths[] = {"/proc", "/dev", "/run", "/tmp", "/root", nullptr};

namespace {
bool beneath(const std::string& path, const std::string& root) {
  return root == "/" || path == root ||
         (path.size() > root.size() && path.compare(0, root.size(), root) == 0 && path[root.size()] == '/');
}

// mountinfo writes space, tab, newline and backslash as \ooo.
std::string unescape_mountinfo(const std::string& f) {
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    auto octal = [&](size_t k) { return k < f.size() && f[k] >= '0' && f[k] <= '7'; };
    if (f[i] == '\\' && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
      out += static_cast<char>((f[i + 1] - '0') * 64 + (f[i + 2] - '0') * 8 + (f[i + 3] - '0'));
      i += 3;
    } else {
      out += f[i];
    }
  }
  return out;
}

// Tree order: '/' sorts before every other byte, so what lies below a path
// follows it at once ("/a", "/a/b", "/a-c").
bool tree_less(const std::string& a, const std::string& b) {
  return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    auto key = [](char c) { return c == '/' ? 0 : static_cast<unsigned char>(c) + 1; };
    return key(x) < key(y);
  });
}
}  // namespace

std::vector<std::string> host_mount_points(const std::vector<std::string>& skip) {
  std::vector<std::string> out;
  auto text = fs::read_small_file("/proc/self/mountinfo", 8u << 20);
  if (!text) return out;
  size_t at = 0;
  while (at < text->size()) {
    size_t end = text->find('\n', at);
    if (end == std::string::npos) end = text->size();
    // id parent major:minor root mount-point ...
    size_t field = at;
    for (int i = 0; i < 4 && field < end; ++i) {
      field = text->find(' ', field);
      field = field == std::string::npos || field > end ? end : field + 1;
    }
    size_t stop = text->find(' ', field);
    if (stop == std::string::npos || stop > end) stop = end;
    std::string point = unescape_mountinfo(text->substr(field, stop - field));
    at = end + 1;
    if (point.empty() || point[0] != '/' || point == "/") continue;
    bool skipped = false;
    for (const std::string& s : skip) skipped |= beneath(point, s);
    if (!skipped) out.push_back(std::move(point));
  }
  std::sort(out.begin(), out.end(), tree_less);
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

int start_holder(const SessionPlan& plan, const ChildSetup& setup, Holder& out, std::string& error) {
  Plan steps;
  if (!build_steps(plan, steps, error)) return EINVAL;
  const Hardening* hardening = setup.hardening();
  if (!hardening) {
    error = "no hardening floor prepared";
    return EINVAL;
  }
  int exe = own_executable();
  if (exe < 0) {
    int e = errno;
    error = std::string("open /proc/self/exe: ") + strerror(e);
    return e;
  }
  // The holder's exec: everything as C strings now.
  std::string uid, gid;
  std::vector<char*> argv = {const_cast<char*>("execd-isolated-init"), const_cast<char*>("--isolated-init")};
  if (plan.refuse_namespaces) argv.push_back(const_cast<char*>("--refuse-namespaces"));
  if (plan.userns) {
    uid = std::to_string(plan.userns->first);
    gid = std::to_string(plan.userns->second);
    argv.push_back(const_cast<char*>("--userns"));
    argv.push_back(uid.data());
    argv.push_back(gid.data());
  }
  argv.push_back(nullptr);
  char* envp[] = {nullptr};
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) {
    int e = errno;
    error = std::string("pipe: ") + strerror(e);
    return e;
  }
  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0) {
    int e = errno;
    close(ready[0]);
    close(ready[1]);
    error = std::string("open /dev/null: ") + strerror(e);
    return e;
  }
  if (plan.root_view == RootView::idmapped && plan.idmap_userns < 0) {
    close(ready[0]);
    close(ready[1]);
    close(devnull);
    error = "an ID-mapped root view without its user namespace";
    return EINVAL;
  }
  HolderFailure failure;
  HolderChild child{plan.staging.c_str(),
                    plan.hostname.c_str(),
                    plan.hostname.size(),
                    !plan.share_net,
                    plan.userns.has_value(),
                    plan.refuse_namespaces,
                    plan.idmap_userns,
                    CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | (plan.share_net ? 0 : CLONE_NEWNET),
                    devnull,
                    ready[1],
                    exe,
                    steps.steps.data(),
                    steps.steps.size(),
                    hardening,
                    argv.data(),
                    envp,
                    &failure};
  VmChild c;
  {
    NewPidNamespaceForChildren pid_namespace;
    if (pid_namespace.error()) {
      int e = pid_namespace.error();
      close(ready[0]);
      close(ready[1]);
      close(devnull);
      error = std::string("unshare(CLONE_NEWPID): ") + strerror(e);
      return e;
    }
    // Waited for with a deadline (a vfork child stopped by SIGSTOP had
    // stopped execd with it): a holder stopped or traced before its exec
    // is killed, and the session is not made.
    c = run_vm_child(holder_child, &child);
  }
  close(ready[1]);
  close(devnull);
  if (c.gave_up.happened()) {
    close(ready[0]);
    error = "the session's holder was " + c.gave_up.describe();
    return ETIMEDOUT;
  }
  if (c.pid < 0) {
    close(ready[0]);
    error = std::string("clone: ") + strerror(c.error);
    return c.error;
  }
  pid_t pid = c.pid;
  if (failure.step) {
    // The child has _exit()ed; the reaper collects it.
    close(ready[0]);
    int e = failure.err ? failure.err : EINVAL;
    error = std::string(failure.step) + (failure.path ? std::string(" ") + failure.path : std::string()) + ": " +
            strerror(e);
    return e;
  }
  fcntl(ready[0], F_SETFL, fcntl(ready[0], F_GETFL) | O_NONBLOCK);
  out.pid = pid;
  out.ready_fd = ready[0];
  return 0;
}

// --- the holder after its exec ---------------------------------------------

bool is_holder_invocation(int argc, char** argv) { return argc >= 2 && strcmp(argv[1], "--isolated-init") == 0; }

namespace {
bool write_proc_text(const char* path, const char* text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t n = strlen(text);
  bool ok = write(fd, text, n) == static_cast<ssize_t>(n);
  close(fd);
  return ok;
}

[[noreturn]] void holder_fail(const char* what) {
  char line[256];
  int n = snprintf(line, sizeof line, "error: %s: %s\n", what, strerror(errno));
  if (n > 0 && write(3, line, static_cast<size_t>(n)) < 0) {
    // nobody to tell
  }
  _exit(1);
}
}  // namespace

void holder_main(int argc, char** argv) {
  // Nothing but the ready channel survives from execd.
  syscall(SYS_close_range, 4u, ~0u, 0u);
  // [--refuse-namespaces] [--userns UID GID]
  int at = 2;
  bool refuse_namespaces = false;
  if (at < argc && strcmp(argv[at], "--refuse-namespaces") == 0) {
    refuse_namespaces = true;
    ++at;
  }
  if (at + 2 < argc && strcmp(argv[at], "--userns") == 0) {
    const char* inside_uid = argv[at + 1];
    const char* inside_gid = argv[at + 2];
    // The session's identity: its uid and gid map to execd's own, one each,
    // and setgroups is off (the kernel's rule for such a map).
    uid_t outside_uid = geteuid();
    gid_t outside_gid = getegid();
    if (unshare(CLONE_NEWUSER) != 0) holder_fail("unshare(CLONE_NEWUSER)");
    char map[64];
    snprintf(map, sizeof map, "%s %u 1\n", inside_uid, outside_uid);
    if (!write_proc_text("/proc/self/uid_map", map)) holder_fail("write uid_map");
    if (!write_proc_text("/proc/self/setgroups", "deny")) holder_fail("write setgroups");
    snprintf(map, sizeof map, "%s %u 1\n", inside_gid, outside_gid);
    if (!write_proc_text("/proc/self/gid_map", map)) holder_fail("write gid_map");
    // No user namespaces below this one (bubblewrap's --disable-userns).
    if (!write_proc_text("/proc/sys/user/max_user_namespaces", "0")) holder_fail("write max_user_namespaces");
    // And none of the capabilities the new namespace gave the holder.
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct none[2]{};
    for (int c = 0; c <= 63; ++c) prctl(PR_CAPBSET_DROP, c, 0, 0, 0);
    if (syscall(SYS_capset, &hdr, none) != 0) holder_fail("capset");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) holder_fail("prctl no_new_privs");
    // Without a user namespace the holder got its filter before its exec;
    // here, once it has made the session's. The holder too: a process of
    // the session that took it over (ptrace) must not find it unfiltered.
    if (refuse_namespaces && install_session_filter()) holder_fail("seccomp filter");
  }
  if (write(3, "ok\n", 3) != 3) _exit(1);
  close(3);
  // PID 1 of the session: reap whatever is orphaned in it, until killed.
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, nullptr);
  for (;;) {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    sigwaitinfo(&chld, nullptr);
  }
}

// --- runs enter --------------------------------------------------------------

bool open_namespaces(pid_t holder, bool own_net, bool userns, IsolatedEntry& out, std::string& error) {
  auto open_ns = [&](const char* name, int& fd) {
    std::string path = "/proc/" + std::to_string(holder) + "/ns/" + name;
    fd = above_child_stdio(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd < 0) error = "open " + path + ": " + strerror(errno);
    return fd >= 0;
  };
  bool ok = open_ns("mnt", out.mnt) && open_ns("pid", out.pid) && open_ns("ipc", out.ipc) && open_ns("uts", out.uts) &&
            (!own_net || open_ns("net", out.net)) && (!userns || open_ns("user", out.user));
  if (!ok) close_namespaces(out);
  return ok;
}

void close_namespaces(IsolatedEntry& e) {
  for (int* fd : {&e.mnt, &e.pid, &e.net, &e.ipc, &e.uts, &e.user, &e.landlock}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

// --- what the kernel allows ---------------------------------------------------

namespace {

// The user namespace of the root view's mapping: every uid and gid but 0
// maps to itself, 0 to nothing. Made by a child that takes a new user
// namespace and waits while execd writes its maps (execd has CAP_SETUID and
// CAP_SETGID where the child came from, so any map goes) and opens it. -1
// with `error`.
int make_idmap_userns(std::string& error) {
  int up[2], down[2];
  if (pipe2(up, O_CLOEXEC) != 0) return error = std::string("pipe: ") + strerror(errno), -1;
  if (pipe2(down, O_CLOEXEC) != 0) {
    error = std::string("pipe: ") + strerror(errno);
    close(up[0]);
    close(up[1]);
    return -1;
  }
  pid_t child = fork();
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    // Its copies of execd's ends would keep it from ever seeing EOF.
    close(up[0]);
    close(down[1]);
    char c = unshare(CLONE_NEWUSER) == 0 ? 'y' : static_cast<char>(errno);
    if (write(up[1], &c, 1) == 1) {
      // Until execd has the namespace open (its end closes).
      while (read(down[0], &c, 1) < 0 && errno == EINTR) {
      }
    }
    _exit(0);
  }
  int fork_errno = errno;
  close(up[1]);
  close(down[0]);
  int fd = -1;
  if (child < 0) {
    error = std::string("fork: ") + strerror(fork_errno);
  } else {
    // Bounded: a child stopped before it answers (a root process of the
    // sandbox sending SIGSTOP to new pids) must not stop execd's loop.
    char c = 0;
    ssize_t n = -1;
    struct pollfd answer {up[0], POLLIN, 0};
    int ready;
    while ((ready = poll(&answer, 1, kHandOverCapMs)) < 0 && errno == EINTR) {
    }
    if (ready == 1) {
      while ((n = read(up[0], &c, 1)) < 0 && errno == EINTR) {
      }
    }
    if (ready == 0) {
      kill(child, SIGKILL);
      error = "the child making the mapping's user namespace did not answer in " + std::to_string(kHandOverCapMs) + " ms";
    } else if (n != 1) {
      error = "the child making the mapping's user namespace died";
    } else if (c != 'y') {
      error = std::string("unshare(CLONE_NEWUSER): ") + strerror(c);
    } else {
      std::string base = "/proc/" + std::to_string(child) + "/";
      const char* map = "1 1 4294967294\n";
      if (!write_proc_text((base + "uid_map").c_str(), map) || !write_proc_text((base + "gid_map").c_str(), map)) {
        error = std::string("write the mapping's uid_map or gid_map: ") + strerror(errno);
      } else if ((fd = above_child_stdio(open((base + "ns/user").c_str(), O_RDONLY | O_CLOEXEC))) < 0) {
        error = "open " + base + "ns/user: " + strerror(errno);
      }
    }
  }
  close(down[1]);
  close(up[0]);
  if (child > 0) {
    // Reaped here, on the loop thread, as the trial holder below.
    while (waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  return fd;
}

// In a trial holder: whether the mount at `path` takes the mapping (on a
// detached copy, dropped at once). 0 or an errno.
int try_idmap(const char* path, int userns) {
  int fd = static_cast<int>(syscall(SYS_open_tree, AT_FDCWD, path, unsigned{OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC}));
  if (fd < 0) return errno;
  struct mount_attr attr {};
  attr.attr_set = MOUNT_ATTR_IDMAP;
  attr.userns_fd = static_cast<uint64_t>(userns);
  int err = syscall(SYS_mount_setattr, fd, "", static_cast<unsigned>(AT_EMPTY_PATH), &attr, sizeof attr) == 0 ? 0 : errno;
  close(fd);
  return err;
}

// The trials' children, on execd's memory (pty/vm_child).
struct ProbeChild {
  const char* proc = nullptr;
  const char* merged = nullptr;
  const char* overlay_data = nullptr;
  volatile int err = 0;
  const char* volatile step = nullptr;
  volatile int overlay_err = -1;
  // The root view's trial: the root, then every host mount a session maps.
  int idmap_userns = -1;
  const char* const* mounts = nullptr;
  size_t mount_count = 0;
  int* mount_errs = nullptr;
  volatile int root_idmap_err = -1;
};

[[noreturn]] void probe_namespaces_child(void* p) {
  auto& r = *static_cast<ProbeChild*>(p);
  auto fail = [&](const char* step) {
    r.err = errno;
    r.step = step;
    _exit(1);
  };
  if (unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET) != 0)
    fail("unshare(CLONE_NEWNS|CLONE_NEWIPC|CLONE_NEWUTS|CLONE_NEWNET)");
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail("make the mount tree private");
  if (mount("proc", r.proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
    fail("mount /proc of a new pid namespace");
  r.overlay_err = mount("overlay", r.merged, "overlay", 0, r.overlay_data) == 0 ? 0 : errno;
  if (r.idmap_userns >= 0) {
    r.root_idmap_err = try_idmap("/", r.idmap_userns);
    for (size_t i = 0; r.root_idmap_err == 0 && i < r.mount_count; ++i) r.mount_errs[i] = try_idmap(r.mounts[i], r.idmap_userns);
  }
  _exit(0);
}

struct UsernsProbeChild {
  char map[64] = {0};
  volatile bool ok = false;
};

[[noreturn]] void probe_userns_child(void* p) {
  auto& u = *static_cast<UsernsProbeChild*>(p);
  if (unshare(CLONE_NEWUSER) != 0) _exit(1);
  int fd = open("/proc/self/uid_map", O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, u.map, strlen(u.map)) < 0) _exit(2);
  u.ok = true;
  _exit(0);
}

}  // namespace

IsolationProbe probe_isolation(const std::string& scratch_dir, std::optional<RootView> root_view,
                               const std::vector<std::string>& skip) {
  IsolationProbe p;
  struct utsname u {};
  if (uname(&u) == 0) p.kernel = u.release;
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct caps[2]{};
  if (syscall(SYS_capget, &hdr, caps) == 0) {
    uint32_t eff = caps[0].effective;
    p.setpriv = (eff & (1u << CAP_SETUID)) && (eff & (1u << CAP_SETGID));
  }
  // A trial holder: new namespaces, a private mount tree, /proc of the new
  // pid namespace, an overlay whose upper lives where sessions' will.
  std::string dir = scratch_dir + "/probe-" + std::to_string(getpid());
  std::string lower = dir + "/lower", upper = dir + "/upper", work = dir + "/work", merged = dir + "/merged",
              proc = dir + "/proc";
  for (const std::string& d : {scratch_dir, dir, lower, upper, work, merged, proc}) mkdir(d.c_str(), 0700);
  std::string overlay_data = "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work;
  ProbeChild result;
  result.proc = proc.c_str();
  result.merged = merged.c_str();
  result.overlay_data = overlay_data.c_str();
  // The root view: a mapping's user namespace, then in the trial holder the
  // root and every host mount a session would map.
  std::string userns_error;
  int idmap_ns = root_view == RootView::masked ? -1 : make_idmap_userns(userns_error);
  std::vector<std::string> mounts = host_mount_points(skip);
  std::vector<const char*> c_mounts;
  for (const std::string& m : mounts) c_mounts.push_back(m.c_str());
  std::vector<int> mount_errs(mounts.size(), -1);  // written by the trial holder
  result.idmap_userns = idmap_ns;
  result.mounts = c_mounts.data();
  result.mount_count = mounts.size();
  result.mount_errs = mount_errs.data();
  pid_t pid = -1;
  int fork_errno = 0, pidns_errno = 0;
  GiveUp gave_up;
  {
    NewPidNamespaceForChildren pid_namespace;
    pidns_errno = pid_namespace.error();
    if (!pidns_errno) {
      // On execd's memory, waited for with a deadline (pty/vm_child).
      VmChild c = run_vm_child(probe_namespaces_child, &result);
      pid = c.pid;
      fork_errno = c.error;
      gave_up = c.gave_up;
    }
  }
  // The child has exited (or was killed); the reaper collects it.
  for (const std::string& d : {proc, merged, work + "/work", work, upper, lower, dir}) rmdir(d.c_str());
  const char* hint =
      " (a seccomp profile such as Docker's default refuses namespaces to a process without CAP_SYS_ADMIN; execd "
      "needs root or CAP_SYS_ADMIN here)";
  // Whatever else happens, the namespace is kept only for an idmapped view.
  struct CloseUnlessKept {
    int& fd;
    ~CloseUnlessKept() {
      if (fd >= 0) close(fd);
    }
  } close_userns{idmap_ns};
  if (pidns_errno) {
    p.message = std::string("creating namespaces failed: unshare(CLONE_NEWPID): ") + strerror(pidns_errno) + hint;
    return p;
  }
  if (gave_up.happened()) {
    p.message = "the trial of namespaces was " + gave_up.describe();
    return p;
  }
  if (pid < 0) {
    p.message = std::string("clone: ") + strerror(fork_errno);
    return p;
  }
  if (result.step) {
    p.message = std::string("creating namespaces failed: ") + result.step + ": " + strerror(result.err) +
                (result.err == EPERM || result.err == EACCES ? hint : "");
    return p;
  }
  // The root view (see RootView in the header).
  if (root_view == RootView::masked) {
    p.root_view_message = "asked for (--isolated-root-view masked)";
  } else if (idmap_ns < 0 || result.root_idmap_err != 0) {
    struct statfs root_fs {};
    constexpr long kOverlayfsMagic = 0x794c7630;
    bool overlay_root = statfs("/", &root_fs) == 0 && static_cast<long>(root_fs.f_type) == kOverlayfsMagic;
    std::string why = idmap_ns < 0 ? "no user namespace for an ID mapping (" + userns_error + ")"
                                 : std::string("the host's root refuses an ID-mapped mount (") +
                                       strerror(result.root_idmap_err) +
                                       (overlay_root ? "; an overlayfs root cannot be ID-mapped)" : ")");
    if (root_view == RootView::idmapped) {
      p.message = "--isolated-root-view idmapped is unavailable here: " + why;
      return p;
    }
    p.root_view_message = why;
  } else {
    p.root_view = RootView::idmapped;
    p.idmap_userns = std::exchange(idmap_ns, -1);
    for (size_t i = 0; i < mounts.size(); ++i) {
      if (mount_errs[i] == 0) continue;
      // What is mounted below a mount seen as it is comes along with it.
      if (!p.not_idmapped.empty() && beneath(mounts[i], p.not_idmapped.back())) continue;
      p.not_idmapped.push_back(mounts[i]);
    }
    p.root_view_message =
        "the host's root and its mounts are ID-mapped without uid and gid 0: files of the host's root show as "
        "nobody/nogroup and only their \"other\" permission bits count";
    if (!p.not_idmapped.empty())
      p.root_view_message += "; these host mounts refuse a mapping and are seen as they are (read-only)";
  }
  // The filter every process of a session gets (a forked child tries it).
  session_filter();  // built here, in the parent
  pid_t trial = fork();
  if (trial == 0) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(2);
    if (install_session_filter()) _exit(3);
    _exit(unshare(CLONE_NEWUSER) != 0 && errno == EPERM ? 0 : 4);
  }
  if (trial > 0) {
    int st = 0;
    while (waitpid(trial, &st, 0) < 0 && errno == EINTR) {
    }
    p.refuses_namespaces = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    p.namespaces_message =
        p.refuses_namespaces ? "every process of a session is refused new namespaces, user namespaces included (seccomp)"
        : WIFEXITED(st) && WEXITSTATUS(st) == 3
            ? "the kernel refuses seccomp filters here: processes of a session can make user namespaces"
            : "the namespace filter did not hold in a trial: processes of a session can make user namespaces";
  } else {
    p.namespaces_message = std::string("fork: ") + strerror(errno) + ": processes of a session can make user namespaces";
  }
  p.available = true;
  p.overlay = result.overlay_err == 0;
  if (!p.overlay)
    p.message = "overlay mounts fail here (" + std::string(strerror(result.overlay_err)) + " with the upper in " +
                scratch_dir + "): workspace mode overlay, diff and commit are unavailable";
  // A user namespace, as the holder makes it. (A process sharing execd's
  // memory may make one, as the holder after its exec; a forked child had copied
  // execd's page tables, and its waitpid had no deadline.)
  UsernsProbeChild userns;
  // Outside uid read first: inside an unmapped namespace geteuid() is the overflow uid.
  snprintf(userns.map, sizeof userns.map, "1000 %u 1\n", static_cast<unsigned>(geteuid()));
  VmChild uc = run_vm_child(probe_userns_child, &userns);
  int uerr = uc.error;
  p.userns = uc.pid > 0 && !uc.gave_up.happened() && userns.ok;
  if (!p.userns) {
    std::string why = uerr                         ? strerror(uerr)
                      : uc.gave_up.happened() ? "the trial was " + uc.gave_up.describe()
                                              : "unshare(CLONE_NEWUSER) or its uid map was refused";
    p.message += std::string(p.message.empty() ? "" : "; ") + "uid_mode userns is unavailable: " + why;
  }
  return p;
}

// --- pool threads in a session ------------------------------------------------

namespace {
int g_home_mnt = -1, g_home_root = -1, g_home_cwd = -1;
thread_local bool t_own_fs = false;
}  // namespace

MountNamespace::~MountNamespace() {
  if (fd >= 0) close(fd);
}

void MountScope::remember_home() {
  if (g_home_mnt >= 0) return;
  g_home_mnt = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
  g_home_root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  g_home_cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
}

MountScope::MountScope(int mnt_fd) {
  if (mnt_fd < 0) return;
  if (g_home_mnt < 0 || g_home_root < 0 || g_home_cwd < 0) {
    error_ = EBADF;
    return;
  }
  // Threads share their root and working directory (fs_struct), and
  // setns(CLONE_NEWNS) refuses to move a shared one: this thread takes its
  // own copy, once.
  if (!t_own_fs) {
    if (unshare(CLONE_FS) != 0) {
      error_ = errno;
      return;
    }
    t_own_fs = true;
  }
  if (setns(mnt_fd, CLONE_NEWNS) != 0) {
    error_ = errno;
    return;
  }
  entered_ = true;
}

MountScope::~MountScope() {
  if (!entered_) return;
  if (setns(g_home_mnt, CLONE_NEWNS) != 0 || fchdir(g_home_root) != 0 || chroot(".") != 0 ||
      fchdir(g_home_cwd) != 0)
    abort();
}

}  // namespace execd::pty
