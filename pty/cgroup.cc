// pty/cgroup: see header.
#include "pty/cgroup.h"

#include "pty/launcher.h"
#include "pty/vm_child.h"
#include "pty/spawn.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <map>
#include <set>
#include <string_view>

#include "fs/small_file.h"
#include "pty/cgroupfs.h"
#include "fs/pool_job.h"

namespace execd::pty {

namespace {

bool read_text(const std::string& path, std::string& out) {
  std::optional<std::string> text = fs::read_small_file(path);
  if (!text) return false;
  out = std::move(*text);
  return true;
}

// A counter file from its open descriptor: a read from offset 0 makes the
// kernel render it afresh. By path when it is not open (fd -1).
// One pread is the whole file when it comes back short: a seq_file renders
// what fits in one go, so the second read that proved the end doubled the
// syscalls of reading a command's counters at its end.
bool read_counter(int fd, const std::string& path, std::string& out) {
  if (fd < 0) return read_text(path, out);
  char buf[4096];
  ssize_t n;
  do n = pread(fd, buf, sizeof buf, 0);
  while (n < 0 && errno == EINTR);
  if (n < 0) return false;
  if (static_cast<size_t>(n) < sizeof buf) {
    out.assign(buf, static_cast<size_t>(n));
    return true;
  }
  std::optional<std::string> text = fs::reread_small_file(fd, 1u << 20);
  if (!text) return false;
  out = std::move(*text);
  return true;
}

// Removes a cgroup's directories unless its cgroup.procs lists a process
// (an unreadable one counts as empty). False while any directory stays.
// Plain syscalls on paths the caller owns: runs on the loop or on the pool.
bool rmdir_if_empty(const std::string& procs_file, const std::vector<std::string>& dirs) {
  std::string procs;
  if (read_text(procs_file, procs) && !split_fields(procs).empty()) return false;
  bool all = true;
  for (const auto& d : dirs)
    if (!d.empty() && rmdir(d.c_str()) != 0 && errno != ENOENT) all = false;
  return all;
}

bool write_text(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = write(fd, text.data(), text.size());
  int e = errno;
  close(fd);
  errno = e;
  return n == static_cast<ssize_t>(text.size());
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

int64_t read_int(const std::string& path, int64_t fallback = -1, int fd = -1) {
  std::string s;
  if (!read_counter(fd, path, s) || s.empty()) return fallback;
  return std::strtoll(s.c_str(), nullptr, 10);
}

// "key value" lines (cpu.stat, memory.events, pids.events, memory.oom_control).
int64_t read_keyed(const std::string& path, const std::string& key, int64_t fallback = -1, int fd = -1) {
  std::string s;
  if (!read_counter(fd, path, s)) return fallback;
  std::vector<std::string_view> f = split_fields(s);
  for (size_t i = 0; i + 1 < f.size(); i += 2)
    if (f[i] == key) return std::strtoll(std::string(f[i + 1]).c_str(), nullptr, 10);
  return fallback;
}

void sleep_ms(int ms) {
  struct timespec ts {0, ms * 1000000L};
  nanosleep(&ts, nullptr);
}

// One cgroup hierarchy execd uses: where execd-<pid> lives in it.
constexpr uint64_t kLingerTickMs = 100;

std::vector<CgroupMount> cgroup_mounts() {
  std::string text;
  return read_text("/proc/self/mountinfo", text) ? parse_cgroup_mounts(text) : std::vector<CgroupMount>{};
}

std::vector<CgroupMembership> own_cgroups() {
  std::string text;
  return read_text("/proc/self/cgroup", text) ? parse_cgroup_memberships(text) : std::vector<CgroupMembership>{};
}

// Removes empty execd-<pid>/cmd-* directories left by an execd that died
// without cleaning up (its processes, if any, are left alone).
void remove_stale(const std::string& parent_dir, time_t min_age) {
  DIR* d = opendir(parent_dir.c_str());
  if (!d) return;
  while (struct dirent* e = readdir(d)) {
    if (strncmp(e->d_name, "execd-", 6) != 0) continue;
    pid_t pid = static_cast<pid_t>(atoi(e->d_name + 6));
    if (pid <= 0 || pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::string dir = parent_dir + "/" + e->d_name;
    // Only old ones: a pid we cannot see may be a live execd in another pid
    // namespace, whose fresh cgroup must not vanish before its child joins.
    struct stat st {};
    if (stat(dir.c_str(), &st) != 0 || time(nullptr) - st.st_mtime < min_age) continue;
    if (DIR* sub = opendir(dir.c_str())) {
      while (struct dirent* c = readdir(sub)) {
        std::string cmd = dir + "/" + c->d_name;
        bool ours = strncmp(c->d_name, "cmd-", 4) == 0 || strncmp(c->d_name, "spare-", 6) == 0;
        if (ours && stat(cmd.c_str(), &st) == 0 && time(nullptr) - st.st_mtime >= min_age)
          rmdir(cmd.c_str());
      }
      closedir(sub);
    }
    rmdir(dir.c_str());
  }
  closedir(d);
}

// How long an execd-<pid> directory of a pid this execd cannot see must
// have been unchanged before it is taken for a dead execd's.
constexpr time_t kStaleCgroupAge = 60;

// True when this process's pid namespace is below another one that this
// /proc shows (NSpid lists one pid per level).
bool in_nested_pid_namespace() {
  std::string text;
  if (!read_text("/proc/self/status", text)) return true;
  size_t at = text.find("\nNSpid:");
  if (at == std::string::npos) return false;
  size_t end = text.find('\n', at + 1);
  std::string line = text.substr(at + 7, end == std::string::npos ? std::string::npos : end - at - 7);
  size_t fields = 0;
  bool in_field = false;
  for (char c : line) {
    bool digit = c >= '0' && c <= '9';
    if (digit && !in_field) ++fields;
    in_field = digit;
  }
  return fields > 1;
}

bool make_base(const std::string& parent_dir, std::string& base) {
  // --cgroup-parent may name one that does not exist yet (one level is made;
  // it is left in place at exit, for the next execd).
  mkdir(parent_dir.c_str(), 0755);
  remove_stale(parent_dir, kStaleCgroupAge);
  base = parent_dir + "/execd-" + std::to_string(getpid());
  if (mkdir(base.c_str(), 0755) != 0 && errno != EEXIST) return false;
  // A cgroup directory has cgroup.procs; anything else is not one.
  return exists(base + "/cgroup.procs");
}

// Returns the log line; `out` gets the hierarchy when it could be set up.
std::string setup_v2(const CgroupMount& m, const std::string& own_path, const std::string& parent,
                     std::vector<CgroupHierarchy>& out) {
  std::string parent_dir = cgroup_dir(m, parent.empty() ? own_path : parent);
  CgroupHierarchy h;
  if (!make_base(parent_dir, h.base)) return "cannot create " + h.base + ": " + strerror(errno);
  // Controllers are only handed down where the parent allows it (its own
  // processes may forbid that: the no-internal-process rule). Best effort.
  for (const char* c : {"memory", "pids", "cpu"}) write_text(parent_dir + "/cgroup.subtree_control", std::string("+") + c);
  std::string avail;
  read_text(h.base + "/cgroup.controllers", avail);
  for (std::string_view c : split_fields(avail))
    if (c == "memory" || c == "pids" || c == "cpu") {
      if (write_text(h.base + "/cgroup.subtree_control", "+" + std::string(c))) h.controllers.emplace(c);
    }
  std::string list;
  for (const auto& x : h.controllers) list += (list.empty() ? "" : ",") + x;
  std::string line = "containment: cgroup-v2 at " + h.base + " (controllers: " + (list.empty() ? "none" : list) + ")";
  out.push_back(std::move(h));
  return line;
}

// Returns the log line; `out` gets every hierarchy that could be set up.
std::string setup_v1(const std::vector<CgroupMount>& mounts, const std::vector<CgroupMembership>& own,
                     const std::string& parent, std::vector<CgroupHierarchy>& out) {
  std::string line;
  for (const char* ctrl : {"pids", "freezer", "memory", "cpuacct", "cpu"}) {
    bool done = false;
    for (const auto& h : out)
      if (h.controllers.count(ctrl)) done = true;
    if (done) continue;
    for (const auto& m : mounts) {
      if (m.v2 || !m.options.count(ctrl)) continue;
      std::string path;
      for (const auto& o : own)
        if (o.controllers.count(ctrl)) path = o.path;
      if (path.empty()) continue;
      CgroupHierarchy h;
      if (!make_base(cgroup_dir(m, parent.empty() ? path : parent), h.base)) break;
      for (const char* c : {"pids", "freezer", "memory", "cpuacct", "cpu"})
        if (m.options.count(c)) h.controllers.insert(c);
      line += (line.empty() ? "" : " ") + h.base;
      out.push_back(std::move(h));
      break;
    }
  }
  return "containment: cgroup-v1 at " + line;
}

}  // namespace

struct Containment::RemovalJob {
  struct Item {
    std::shared_ptr<CommandCgroup> cg;  // kept alive; only the loop touches it
    std::string procs_file;
    std::vector<std::string> dirs;
    bool removed;
  };
  Containment* owner;
  std::vector<Item> items;
};

void Containment::on_linger_tick() {
  uint64_t now = uv_now(loop_);
  auto& l = lingering_;
  for (auto& x : l) {
    // Frozen time does not count: the deadlines move on at the thaw.
    if (x.deadline_ms && now >= x.deadline_ms && !frozen_) {
      x.cg->kill_all();
      x.deadline_ms = 0;
    }
  }
  l.erase(std::remove_if(l.begin(), l.end(), [](const Lingering& x) { return x.cg->removed_; }), l.end());
  if (l.empty()) {
    uv_timer_stop(&timer_);
    return;
  }
  if (removing_) return;
  // The population reads and rmdirs go to the threadpool: on the loop, a
  // tick after 100 ms of back-to-back commands held it for ~6 ms (three
  // rmdirs of a few hundred microseconds each per command), which was the
  // round trip's p99. The job works on copies of the paths; the loop applies
  // the outcome. A bounded number per job.
  auto job = std::make_unique<RemovalJob>();
  job->owner = this;
  for (size_t i = 0; i < l.size() && i < 256; ++i) {
    const CommandCgroup& cg = *l[i].cg;
    job->items.push_back({l[i].cg, cg.procs_dir_ + "/cgroup.procs", cg.dirs_, false});
  }
  removing_ = true;
  fs::queue_job<RemovalJob>(
      loop_, std::move(job),
      [](RemovalJob& j) {
        for (auto& item : j.items) item.removed = rmdir_if_empty(item.procs_file, item.dirs);
      },
      [](RemovalJob& j, int) { j.owner->on_removal_done(j); });
}

void Containment::on_removal_done(RemovalJob& job) {
  removing_ = false;
  for (auto& item : job.items)
    if (item.removed) item.cg->mark_removed();
  job.items.clear();
  auto& l = lingering_;
  l.erase(std::remove_if(l.begin(), l.end(), [](const Lingering& x) { return x.cg->removed_; }), l.end());
  if (l.empty() && timer_open_) uv_timer_stop(&timer_);
  // A removed cgroup is gone with its last owner; an expired entry here
  // would keep its control block (after a burst, hundreds of them pinned as
  // many heap pages until the next command came).
  forget_expired();
}

const char* containment_mode_name(ContainmentMode m) {
  switch (m) {
    case ContainmentMode::cgroup_v2: return "cgroup-v2";
    case ContainmentMode::cgroup_v1: return "cgroup-v1";
    case ContainmentMode::subreaper: return "subreaper";
    default: return "process-group";
  }
}

// ---------------------------------------------------------------------------
// One command's cgroup

CommandCgroup::~CommandCgroup() {
  close_join_fds();
  close_counters();
}

void CommandCgroup::close_join_fds() {
  for (int fd : join_fds_) close(fd);
  join_fds_.clear();
  if (dir_fd_ >= 0) close(dir_fd_);
  dir_fd_ = -1;
}

bool CommandCgroup::read_procs(std::string& out) const {
  int dir = counter_fds_[kProcsDir];
  if (dir < 0) return read_text(procs_dir_ + "/cgroup.procs", out);
  int fd = openat(dir, "cgroup.procs", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::optional<std::string> text = fs::reread_small_file(fd);
  close(fd);
  if (!text) return false;
  out = std::move(*text);
  return true;
}

std::vector<int> CommandCgroup::read_pids() const {
  std::vector<int> pids;
  std::string s;
  if (!read_procs(s)) return pids;
  for (std::string_view f : split_fields(s)) pids.push_back(std::atoi(std::string(f).c_str()));
  return pids;
}

int CommandCgroup::population() const {
  if (removed_) return 0;
  std::string s;
  if (!read_procs(s)) return -1;  // opened afresh: see Counter in the header
  int n = static_cast<int>(std::count(s.begin(), s.end(), '\n'));
  if (n > 0 && departing_here()) {
    // The launcher that started the command exits right after its exec;
    // under load (or stopped) it can still be here.
    std::string line = std::to_string(departing_pid_) + "\n";
    size_t at = s.find(line);
    while (at != std::string::npos && at != 0 && s[at - 1] != '\n') at = s.find(line, at + 1);
    if (at != std::string::npos) --n;
  }
  return n;
}

void CommandCgroup::signal_all(int sig) {
  if (removed_) return;
  signalled_ = true;
  for (int pid : read_pids()) kill(pid, sig);
}

int CommandCgroup::kill_all() {
  if (removed_) return 0;
  signalled_ = true;
  if (v2_ && write_text(dirs_[0] + "/cgroup.kill", "1")) return population();
  // Frozen, nobody can fork while we go through the list; without a freezer,
  // go round until nobody is left (a fork bomb is outpaced: each round kills
  // every member there is, and new ones can only come from them).
  std::string freeze_file = v2_ ? dirs_[0] + "/cgroup.freeze" : freezer_dir_.empty() ? "" : freezer_dir_ + "/freezer.state";
  bool frozen = !freeze_file.empty() && write_text(freeze_file, v2_ ? "1" : "FROZEN");
  if (frozen && !v2_) {
    std::string st;
    for (int i = 0; i < 200 && read_text(freeze_file, st) && st.rfind("FROZEN", 0) != 0; ++i) sleep_ms(1);
  }
  int signalled = 0;
  for (int round = 0; round < (frozen ? 2 : 200); ++round) {
    std::vector<int> pids = read_pids();
    if (pids.empty()) break;
    for (int pid : pids)
      if (kill(pid, SIGKILL) == 0) ++signalled;
    if (frozen) break;
  }
  if (frozen) write_text(freeze_file, v2_ ? "0" : "THAWED");
  return signalled;
}

CgroupUsage CommandCgroup::usage() const {
  CgroupUsage u;
  if (removed_) return u;
  if (v2_) {
    const std::string& d = dirs_[0];
    int64_t user = read_keyed(d + "/cpu.stat", "user_usec");
    int64_t sys = read_keyed(d + "/cpu.stat", "system_usec");
    int64_t peak = read_int(d + "/memory.peak");
    u.known = user >= 0 && sys >= 0;
    u.user_cpu_ms = std::max<int64_t>(0, user) / 1000;
    u.system_cpu_ms = std::max<int64_t>(0, sys) / 1000;
    u.peak_memory_bytes = std::max<int64_t>(0, peak);
    u.oom_killed = read_keyed(d + "/memory.events", "oom_kill", 0) > 0;
    u.pids_limit_hit = read_keyed(d + "/pids.events", "max", 0) > 0;
    return u;
  }
  if (!cpuacct_dir_.empty()) {
    // usage_user/usage_sys come from tick sampling, which loses whatever
    // the hypervisor stole (on a busy VM a 300 ms busy loop read as 80 ms);
    // cpuacct.usage is the scheduler's exact total. The total is reported,
    // split in the ratio the ticks saw.
    // usage_all is "cpu user system" per CPU: the same tick counts that
    // usage_user and usage_sys sum, in one read.
    int64_t total = read_int(cpuacct_dir_ + "/cpuacct.usage", -1, counter_fds_[kCpuTotal]);
    int64_t user = -1, sys = -1;
    std::string all;
    if (read_counter(counter_fds_[kCpuSplit], cpuacct_dir_ + "/cpuacct.usage_all", all)) {
      std::vector<std::string_view> f = split_fields(all);
      // A header of 3 fields, then 3 per CPU.
      if (f.size() >= 6 && f.size() % 3 == 0 && f[0] == "cpu") {
        user = sys = 0;
        for (size_t i = 3; i + 2 < f.size(); i += 3) {
          user += std::strtoll(std::string(f[i + 1]).c_str(), nullptr, 10);
          sys += std::strtoll(std::string(f[i + 2]).c_str(), nullptr, 10);
        }
      }
    }
    u.known = total >= 0 && user >= 0 && sys >= 0;
    if (u.known) {
      double user_share = user + sys > 0 ? static_cast<double>(user) / static_cast<double>(user + sys) : 1.0;
      int64_t user_ns = static_cast<int64_t>(static_cast<double>(total) * user_share);
      u.user_cpu_ms = user_ns / 1000000;
      u.system_cpu_ms = (total - user_ns) / 1000000;
    }
  }
  if (!memory_dir_.empty()) {
    u.peak_memory_bytes =
        std::max<int64_t>(0, read_int(memory_dir_ + "/memory.max_usage_in_bytes", -1, counter_fds_[kMemoryPeak]));
    u.oom_killed = read_keyed(memory_dir_ + "/memory.oom_control", "oom_kill", 0, counter_fds_[kOomControl]) > 0;
  }
  if (!pids_dir_.empty())
    u.pids_limit_hit = read_keyed(pids_dir_ + "/pids.events", "max", 0, counter_fds_[kPidsEvents]) > 0;
  return u;
}

void CommandCgroup::open_counters() {
  auto open_one = [&](Counter c, const std::string& dir, const char* file) {
    if (!dir.empty() && counter_fds_[c] < 0) counter_fds_[c] = open((dir + "/" + file).c_str(), O_RDONLY | O_CLOEXEC);
  };
  open_one(kCpuTotal, cpuacct_dir_, "cpuacct.usage");
  open_one(kCpuSplit, cpuacct_dir_, "cpuacct.usage_all");
  open_one(kMemoryPeak, memory_dir_, "memory.max_usage_in_bytes");
  open_one(kOomControl, memory_dir_, "memory.oom_control");
  open_one(kPidsEvents, pids_dir_, "pids.events");
  if (!procs_dir_.empty() && counter_fds_[kProcsDir] < 0)
    counter_fds_[kProcsDir] = open(procs_dir_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
}

void CommandCgroup::close_counters() {
  for (int& fd : counter_fds_) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

bool CommandCgroup::try_remove() {
  if (removed_) return true;
  bool all = rmdir_if_empty(procs_dir_ + "/cgroup.procs", dirs_);
  if (all) mark_removed();
  return all;
}

void CommandCgroup::mark_removed() {
  removed_ = true;
  close_counters();
  departing_pid_ = -1;
  departing_reaped_.reset();
  // An owner may keep the object a while yet (a session until it ends); its
  // paths are dead weight from here on.
  std::vector<std::string>().swap(dirs_);
  for (std::string* path : {&procs_dir_, &memory_dir_, &pids_dir_, &freezer_dir_, &cpuacct_dir_})
    std::string().swap(*path);  // assigning an empty string would keep the buffer
}

std::shared_ptr<CommandCgroup> CommandCgroup::hand_over() {
  std::shared_ptr<CommandCgroup> next(new CommandCgroup);
  next->name_ = name_;  // a copy: the finished command's object keeps its name
  // The paths move: mark_removed() would drop this object's copies anyway.
  next->dirs_ = std::move(dirs_);
  next->procs_dir_ = std::move(procs_dir_);
  next->memory_dir_ = std::move(memory_dir_);
  next->pids_dir_ = std::move(pids_dir_);
  next->freezer_dir_ = std::move(freezer_dir_);
  next->cpuacct_dir_ = std::move(cpuacct_dir_);
  next->v2_ = v2_;
  next->reusable_ = true;
  for (int i = 0; i < kCounters; ++i) std::swap(next->counter_fds_[i], counter_fds_[i]);
  close_join_fds();
  mark_removed();
  return next;
}

bool CommandCgroup::reset_for_reuse() {
  // Page cache read by earlier commands stays charged to a memory cgroup
  // after they end; past this much the cgroup is removed rather than have
  // the next command's peak include it. (Net of it, the peak was 0 for a
  // command that never rose above it, as some of it was uncharged meanwhile.)
  constexpr int64_t kMaxCarriedMemory = 1 << 20;
  if (v2_ || removed_) return false;
  if (!memory_dir_.empty()) {
    if (read_keyed(memory_dir_ + "/memory.oom_control", "oom_kill", -1, counter_fds_[kOomControl]) != 0) return false;
    int64_t charged = read_int(memory_dir_ + "/memory.usage_in_bytes");
    if (charged < 0 || charged > kMaxCarriedMemory) return false;
    // Writing 0 sets the peak to the usage of now.
    if (!write_text(memory_dir_ + "/memory.max_usage_in_bytes", "0")) return false;
  }
  // Zeroes usage_all's user and system columns too.
  if (!cpuacct_dir_.empty() && !write_text(cpuacct_dir_ + "/cpuacct.usage", "0")) return false;
  if (!pids_dir_.empty() && read_keyed(pids_dir_ + "/pids.events", "max", -1, counter_fds_[kPidsEvents]) != 0)
    return false;
  for (const auto& d : dirs_) {
    if (d.empty()) continue;
    int fd = open((d + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return false;
    join_fds_.push_back(fd);
  }
  return population() == 0;
}

// ---------------------------------------------------------------------------
// The daemon-wide side

std::string Containment::init(uv_loop_t* loop, bool enabled, const std::string& parent) {
  loop_ = loop;
  uv_timer_init(loop, &timer_);
  timer_.data = this;
  timer_open_ = true;
  uv_unref(reinterpret_cast<uv_handle_t*>(&timer_));
  mode_ = ContainmentMode::process_group;
  if (!enabled) return without_cgroups("--no-cgroups");
  auto mounts = cgroup_mounts();
  auto own = own_cgroups();
  const CgroupMount* unified = nullptr;
  bool v1_useful = false;
  for (const auto& m : mounts) {
    if (m.v2) unified = &m;
    else if (m.options.count("pids") || m.options.count("memory") || m.options.count("freezer"))
      v1_useful = true;
  }
  std::string unified_path;
  for (const auto& o : own)
    if (o.unified) unified_path = o.path;
  std::string why;
  // v2 first when its hierarchy carries the controllers (a pure v2 machine);
  // on a hybrid one the controllers sit in v1, which then does more.
  if (unified && !unified_path.empty()) {
    std::string ctrls;
    read_text(unified->mount_point + "/cgroup.controllers", ctrls);
    bool has_controllers = ctrls.find("memory") != std::string::npos || ctrls.find("pids") != std::string::npos;
    if (has_controllers || !v1_useful) {
      std::string line = setup_v2(*unified, unified_path, parent, hierarchies_);
      if (!hierarchies_.empty()) {
        mode_ = ContainmentMode::cgroup_v2;
        clone_into_cgroup_ = probe_clone_into_cgroup();
        return line + (clone_into_cgroup_ ? "; commands are born in their cgroups (clone3)"
                                          : "; no clone3 here: commands join their cgroups");
      }
      why = line;
    }
  }
  if (v1_useful) {
    std::string line = setup_v1(mounts, own, parent, hierarchies_);
    if (!hierarchies_.empty()) {
      mode_ = ContainmentMode::cgroup_v1;
      return line;
    }
  }
  return without_cgroups("no usable cgroup hierarchy" + (why.empty() ? "" : ": " + why));
}

std::string Containment::without_cgroups(const std::string& why) {
  mode_ = ContainmentMode::process_group;
  if (keeper_executable() < 0)
    return "containment: process-group (" + why + "; no keepers: /proc/self/exe cannot be opened)";
  mode_ = ContainmentMode::subreaper;
  return "containment: subreaper (" + why + "): each run under a keeper of its own (" +
         (keeper_is_embedded() ? "the embedded static keeper" : "execd's own binary") + ")";
}

std::shared_ptr<CommandCgroup> Containment::new_cgroup() {
  std::shared_ptr<CommandCgroup> cg(new CommandCgroup);
  cg->name_ = "cmd-" + std::to_string(++next_id_);
  cg->v2_ = mode_ == ContainmentMode::cgroup_v2;
  return cg;
}

void Containment::forget_expired() {
  all_.erase(std::remove_if(all_.begin(), all_.end(), [](const std::weak_ptr<CommandCgroup>& w) { return w.expired(); }),
             all_.end());
}

void Containment::track(const std::shared_ptr<CommandCgroup>& cg) {
  forget_expired();
  all_.push_back(cg);
}

std::string CommandCgroup::make_dirs(const std::vector<CgroupHierarchy>& hierarchies, const ResourceLimits& limits) {
  for (const auto& h : hierarchies) {
    // Every hierarchy joined costs a mkdir and an rmdir and the child a
    // cgroup.procs write (the dearest step: the kernel's threadgroup lock),
    // so a v1 hierarchy of cpu alone only for cpu_shares, and one of pids
    // alone only for a pids limit (membership is read from the others).
    bool only = !v2_ && h.controllers.size() == 1;
    if ((only && h.controllers.count("cpu") && limits.cpu_shares <= 0) ||
        (only && h.controllers.count("pids") && limits.pids <= 0)) {
      dirs_.emplace_back();
      continue;
    }
    std::string dir = h.base + "/" + name_;
    if (mkdir(dir.c_str(), 0755) != 0) return "mkdir " + dir;
    dirs_.push_back(dir);
    int fd = open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return "open " + dir + "/cgroup.procs";
    join_fds_.push_back(fd);
    if (v2_ && dir_fd_ < 0) {
      dir_fd_ = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (dir_fd_ < 0) return "open " + dir;
    }
    if (procs_dir_.empty() || h.controllers.count("pids")) procs_dir_ = dir;
    if (h.controllers.count("memory")) memory_dir_ = dir;
    if (h.controllers.count("pids")) pids_dir_ = dir;
    if (h.controllers.count("freezer")) freezer_dir_ = dir;
    if (h.controllers.count("cpuacct")) cpuacct_dir_ = dir;
  }
  if (!v2_) open_counters();
  return {};
}

void CommandCgroup::discard() {
  int e = errno;
  close_join_fds();
  close_counters();
  for (const auto& d : dirs_)
    if (!d.empty()) rmdir(d.c_str());
  removed_ = true;
  errno = e;
}

struct Containment::MakeJob {
  Containment* owner;
  std::vector<CgroupHierarchy> hierarchies;  // a copy: the pool reads nothing of the owner
  std::shared_ptr<CommandCgroup> cg;         // the loop does not see it until on_made
  std::string failed;
};

void Containment::enable_launchers(Reaper* reaper, const ChildSetup* setup, size_t count) {
  reaper_ = reaper;
  if (mode_ == ContainmentMode::subreaper) keepers_.init(loop_, reaper);
  child_setup_ = setup;
  launchers_ = count;
}

void Containment::arm_spares() {
  if (!reaper_ || launchers_ == 0 || frozen_) return;
  size_t armed = 0;
  for (auto& cg : ready_) {
    if (armed >= launchers_) break;
    if (cg->launcher_ && !cg->launcher()) cg->launcher_.reset();  // it died: another
    if (!cg->launcher_) {
      std::string error;
      const ChildSetup::Signals& reset = child_setup_->signals();
      cg->launcher_ = Launcher::start(*reaper_, cg->join_fds_, reset.list, reset.count, error);
      if (!cg->launcher_) {
        // Commands join their cgroups as they start, as without launchers.
        launcher_error_ = error;
        launchers_ = 0;
        return;
      }
    }
    ++armed;
  }
}

void Containment::count_launcher_given_up(const std::string& why) {
  ++starts_.launcher_given_up;
  last_given_up_ = why;
}

void Containment::count_child_given_up(const std::string& why) {
  ++starts_.child_given_up;
  last_given_up_ = why;
}

void Containment::count_start(Placement p) {
  switch (p) {
    case Placement::launcher: ++starts_.launcher; break;
    case Placement::clone_into_cgroup: ++starts_.clone_into_cgroup; break;
    case Placement::joined: ++starts_.joined; break;
    case Placement::none: ++starts_.none; break;
    case Placement::keeper: ++starts_.keeper; break;
  }
}

size_t Containment::waiting_launchers() const {
  size_t n = 0;
  for (const auto& cg : ready_)
    if (cg->launcher_ && cg->launcher_->joined()) ++n;
  return n;
}

Launcher* CommandCgroup::launcher() const { return launcher_ && !launcher_->failed() ? launcher_.get() : nullptr; }

void CommandCgroup::drop_launcher() {
  if (launcher_ && !launcher_->reaped()) {
    departing_pid_ = launcher_->pid();
    departing_reaped_ = launcher_->reaped_flag();
  }
  launcher_.reset();
}

void CommandCgroup::let_launcher_go() {
  if (departing_here()) kill(departing_pid_, SIGKILL);  // not reaped: still that process
  else departing_reaped_.reset();
}

// A launcher's clone (~70 µs with its pipe and descriptor work, after a
// pause) must not be on the path of the command that took the spare. The
// next turn of the loop was not enough: after a pause the kernel tends to
// run the command's shell on the loop's own CPU, so the loop thread wakes
// from the launcher's exec only once a short command has exited, and the
// clone then went before that command's result. So the spare is armed
// just before the loop would block with nothing ready, or after
// kArmDeferrals busy turns at most, so that a loop kept busy (a streaming
// command) still gets its spares soon. The look is a zero-timeout poll()
// of libuv's epoll descriptor, which leaves its ready list as it was: an
// epoll_wait() for one event would move that event behind the others, and
// a command's stderr read before the stdout it wrote first.
constexpr int kArmDeferrals = 16;

void Containment::arm_soon() {
  if (!reaper_ || launchers_ == 0 || !timer_open_) return;
  if (!arm_prepare_open_) {
    uv_prepare_init(loop_, &arm_prepare_);
    arm_prepare_.data = this;
    uv_unref(reinterpret_cast<uv_handle_t*>(&arm_prepare_));
    arm_prepare_open_ = true;
  }
  arm_deferrals_ = 0;
  uv_prepare_start(&arm_prepare_, [](uv_prepare_t* h) { static_cast<Containment*>(h->data)->arm_when_idle(); });
}

// A signal that interrupts the look (a command's SIGCHLD, typically) has
// made work: its handler writes to a descriptor in that set. Looking again
// sees it; taking EINTR for "nothing ready" put a clone before the exit of
// the command whose signal it was.
bool loop_has_ready_io(uv_loop_t* loop) {
  pollfd backend = {uv_backend_fd(loop), POLLIN, 0};
  int n;
  do n = poll(&backend, 1, 0);
  while (n < 0 && errno == EINTR);
  return n > 0;
}

void Containment::arm_when_idle() {
  if (arm_deferrals_ < kArmDeferrals && loop_has_ready_io(loop_)) {
    ++arm_deferrals_;
    return;
  }
  uv_prepare_stop(&arm_prepare_);
  arm_spares();
}

void Containment::make_ahead() {
  arm_soon();
  if (making_ || !timer_open_ || hierarchies_.empty() || !spares_wanted() ||
      ready_.size() + resetting_ >= std::max(kReadyCgroups, launchers_))
    return;
  making_ = true;
  fs::queue_job<MakeJob>(
      loop_, std::make_unique<MakeJob>(MakeJob{this, hierarchies_, new_cgroup(), {}}),
      [](MakeJob& j) {
        j.failed = j.cg->make_dirs(j.hierarchies, ResourceLimits{});
        j.cg->reusable_ = true;
        if (!j.failed.empty()) j.cg->discard();
      },
      [](MakeJob& j, int) { j.owner->on_made(j); });
}

void Containment::on_made(MakeJob& job) {
  making_ = false;
  if (hierarchies_.empty()) {
    // shutdown() came while the job ran: its rmdir of execd-<pid> may have
    // failed on the spare (or come before a mkdir that then failed), so
    // that directory goes here, after the spare.
    if (job.failed.empty()) job.cg->try_remove();
    for (const auto& h : job.hierarchies) rmdir(h.base.c_str());
    return;
  }
  // A failure is not retried from here: the next create() makes its cgroup
  // on the loop as before (and reports what failed), then tries again.
  if (!job.failed.empty()) return;
  track(job.cg);
  ready_.push_back(std::move(job.cg));
  make_ahead();
}

std::shared_ptr<CommandCgroup> Containment::create(const ResourceLimits& limits, std::string& error) {
  error.clear();
  if (!has_cgroups()) {
    if (limits.any()) error = std::string("limits need cgroups (containment is ") + containment_mode_name(mode_) + ")";
    return nullptr;
  }
  if (!limits.any()) {
    // One whose launcher is in it and waiting, first (one still joining
    // would make this command wait for its join).
    auto waiting = std::find_if(ready_.begin(), ready_.end(), [](const std::shared_ptr<CommandCgroup>& c) {
      return c->launcher_ && c->launcher_->joined();
    });
    if (waiting != ready_.end()) {
      std::shared_ptr<CommandCgroup> cg = std::move(*waiting);
      ready_.erase(waiting);
      make_ahead();
      return cg;
    }
  }
  while (!limits.any() && !ready_.empty()) {
    std::shared_ptr<CommandCgroup> cg = std::move(ready_.front());
    ready_.erase(ready_.begin());
    make_ahead();
    // A launcher in it: it is there (a populated cgroup cannot be removed).
    // One still joining takes the job all the same: its run() waits for the
    // join with a deadline, as for the job (a child started here instead
    // would wait for that very migration anyway). Waiting for the join
    // here had no deadline worth the name (a second), and a stopped
    // launcher held the loop for it.
    if (cg->launcher()) return cg;
    if (cg->launcher_) {
      // Failed (its cgroup was removed from outside) or dead: gone first,
      // so that the count below is of commands only (a failed one never
      // joined; a dead one goes at once).
      cg->launcher_->kill();
      cg->launcher_->wait_gone(kHandOverLookMs);
      cg->drop_launcher();
    }
    // Still there? (its cgroup.procs is gone once something outside execd
    // removed it, and the child could not join it).
    if (cg->population() == 0) return cg;
    cg->discard();
  }
  std::shared_ptr<CommandCgroup> cg = new_cgroup();
  auto fail = [&](const std::string& what) -> std::shared_ptr<CommandCgroup> {
    error = what + ": " + strerror(errno);
    cg->discard();
    return nullptr;
  };
  if (std::string failed = cg->make_dirs(hierarchies_, limits); !failed.empty()) return fail(failed);
  // Limits: a requested one that cannot be applied fails the start rather
  // than run the command unbounded.
  auto dir_of = [&](const char* ctrl) -> std::string {
    if (cg->v2_) {
      return hierarchies_[0].controllers.count(ctrl) ? cg->dirs_[0] : "";
    }
    for (size_t i = 0; i < hierarchies_.size(); ++i)
      if (hierarchies_[i].controllers.count(ctrl)) return cg->dirs_[i];
    return "";
  };
  if (limits.memory_bytes > 0) {
    std::string d = dir_of("memory");
    if (d.empty()) return fail("memory limit: no memory controller");
    std::string v = std::to_string(limits.memory_bytes);
    if (cg->v2_) {
      if (!write_text(d + "/memory.max", v)) return fail("memory.max");
      write_text(d + "/memory.swap.max", "0");  // an OOM, not a slow swap-out
    } else {
      if (!write_text(d + "/memory.limit_in_bytes", v)) return fail("memory.limit_in_bytes");
      if (exists(d + "/memory.memsw.limit_in_bytes")) write_text(d + "/memory.memsw.limit_in_bytes", v);
    }
  }
  if (limits.pids > 0) {
    std::string d = dir_of("pids");
    if (d.empty()) return fail("pids limit: no pids controller");
    if (!write_text(d + "/pids.max", std::to_string(limits.pids))) return fail("pids.max");
  }
  if (limits.cpu_shares > 0) {
    std::string d = dir_of("cpu");
    if (d.empty()) return fail("cpu limit: no cpu controller");
    int64_t shares = std::clamp<int64_t>(limits.cpu_shares, 2, 262144);
    if (cg->v2_) {
      // The mapping runc and systemd use from shares to weight.
      int64_t weight = 1 + ((shares - 2) * 9999) / 262142;
      if (!write_text(d + "/cpu.weight", std::to_string(weight))) return fail("cpu.weight");
    } else if (!write_text(d + "/cpu.shares", std::to_string(shares))) {
      return fail("cpu.shares");
    }
  }
  cg->reusable_ = !limits.any();
  track(cg);
  make_ahead();
  return cg;
}

void Containment::linger(std::shared_ptr<CommandCgroup> cg, uint64_t deadline_ms) {
  if (!cg) return;
  // Even an empty one is removed from the timer, not here: rmdir is off the
  // path of the command's terminal event.
  if (!timer_open_) {
    remove_after_shutdown(*cg);
    return;
  }
  for (auto& x : lingering_)
    if (x.cg == cg) {
      x.deadline_ms = deadline_ms;
      return;
    }
  lingering_.push_back({std::move(cg), deadline_ms});
  if (!uv_is_active(reinterpret_cast<uv_handle_t*>(&timer_)))
    uv_timer_start(&timer_, [](uv_timer_t* t) { static_cast<Containment*>(t->data)->on_linger_tick(); },
                   kLingerTickMs, kLingerTickMs);
}

struct Containment::ReuseJob {
  Containment* owner;
  std::shared_ptr<CommandCgroup> cg;  // the loop does not see it until on_reset
  bool reused;
  bool removed;
};

void Containment::release(std::shared_ptr<CommandCgroup> cg, bool empty, uint64_t deadline_ms) {
  if (!cg) return;
  if (!empty || !cg->reusable_ || cg->signalled_ || cg->removed_ || mode_ != ContainmentMode::cgroup_v1 ||
      !timer_open_ || hierarchies_.empty() || ready_.size() + resetting_ >= kMaxSpares) {
    cg->close_counters();  // what remains reads by path, rarely
    linger(std::move(cg), deadline_ms);
    return;
  }
  ++resetting_;
  fs::queue_job<ReuseJob>(
      loop_, std::make_unique<ReuseJob>(ReuseJob{this, cg->hand_over(), false, false}),
      [](ReuseJob& j) {
        j.reused = j.cg->reset_for_reuse();
        if (!j.reused) {
          j.cg->close_join_fds();
          j.removed = rmdir_if_empty(j.cg->procs_dir_ + "/cgroup.procs", j.cg->dirs_);
        }
      },
      [](ReuseJob& j, int) { j.owner->on_reset(j); });
}

void Containment::on_reset(ReuseJob& job) {
  --resetting_;
  std::shared_ptr<CommandCgroup>& cg = job.cg;
  if (hierarchies_.empty()) {
    // shutdown() came while the job ran (see on_made).
    cg->close_join_fds();
    if (job.removed) cg->mark_removed();
    remove_after_shutdown(*cg);
    return;
  }
  if (job.reused) {
    track(cg);
    ready_.push_back(std::move(cg));
    arm_soon();
  } else if (job.removed) {
    cg->mark_removed();
  } else {
    // Neither reused nor removed (a member still there): it lingers, and
    // is tracked as every other cgroup is, or shutdown() would drop it from
    // lingering_ without its rmdir (this object is not the one the command
    // had: hand_over() made it).
    cg->close_counters();
    track(cg);
    linger(std::move(cg), 0);
  }
}

void Containment::remove_after_shutdown(CommandCgroup& cg) {
  cg.try_remove();
  for (const auto& base : bases_after_shutdown_) rmdir(base.c_str());  // the last one back succeeds
}

void Containment::kill_everything() {
  keepers_.kill_everything();
  for (auto& w : all_)
    if (auto cg = w.lock()) cg->kill_all();
}

void Containment::shutdown() {
  // Frozen processes take no SIGKILL until thawed.
  if (frozen_) thaw();
  // Launchers first: one in the middle of its join is in no cgroup.procs
  // yet, so the kill below would miss it and it would join a cgroup that is
  // then never removed. Killed by pid (a stopped one would never read the
  // end-of-file that retires an idle one); the wait is bounded.
  std::vector<std::unique_ptr<Launcher>> retiring;
  for (auto& cg : ready_)
    if (cg->launcher_) retiring.push_back(std::move(cg->launcher_));
  for (auto& l : retiring) l->kill();
  for (auto& l : retiring) l->wait_gone(kGoneCapMs);
  retiring.clear();
  kill_everything();
  // SIGKILLed members take a moment to leave; a bounded wait, then rmdir.
  for (int i = 0; i < 100; ++i) {
    bool busy = false;
    for (auto& w : all_)
      if (auto cg = w.lock(); cg && !cg->try_remove()) busy = true;
    if (!busy) break;
    sleep_ms(10);
  }
  lingering_.clear();
  ready_.clear();
  all_.clear();
  // What an execd killed before us (a restart after SIGKILL) left empty,
  // at once; but not from inside a nested pid namespace, where every execd
  // outside it looks dead (kill() says ESRCH): an execd under `unshare
  // --pid` removed the live execds' empty cgroups, and their next commands
  // started outside any cgroup.
  time_t stale_after = in_nested_pid_namespace() ? kStaleCgroupAge : 0;
  for (const auto& h : hierarchies_) {
    rmdir(h.base.c_str());
    remove_stale(h.base.substr(0, h.base.rfind('/')), stale_after);
  }
  for (const auto& h : hierarchies_) bases_after_shutdown_.push_back(h.base);
  hierarchies_.clear();
}

void Containment::close() {
  keepers_.close();
  if (arm_prepare_open_) {
    arm_prepare_open_ = false;
    uv_prepare_stop(&arm_prepare_);
    uv_close(reinterpret_cast<uv_handle_t*>(&arm_prepare_), nullptr);
  }
  if (freeze_timer_open_) {
    freeze_timer_open_ = false;
    uv_timer_stop(&freeze_timer_);
    uv_close(reinterpret_cast<uv_handle_t*>(&freeze_timer_), nullptr);
  }
  if (!timer_open_) return;
  timer_open_ = false;
  uv_timer_stop(&timer_);
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
}

size_t Containment::lingering_with_members() const {
  size_t n = keepers_.lingering_with_members();
  for (const auto& x : lingering_)
    if (!x.cg->removed_ && x.cg->population() > 0) ++n;
  return n;
}

// ---------------------------------------------------------------------------
// Freezing

uint64_t hold_timer(uv_timer_t* t) {
  if (!t || !uv_is_active(reinterpret_cast<uv_handle_t*>(t))) return 0;
  uint64_t left = uv_timer_get_due_in(t);
  uv_timer_stop(t);
  return left + 1;
}

void resume_timer(uv_timer_t* t, uint64_t held, uv_timer_cb cb) {
  if (t && held) uv_timer_start(t, cb, held - 1, 0);
}

bool Containment::can_freeze() const { return !freeze_file().empty(); }

std::string Containment::freeze_file() const {
  if (mode_ == ContainmentMode::cgroup_v2 && !hierarchies_.empty()) return hierarchies_[0].base + "/cgroup.freeze";
  if (mode_ == ContainmentMode::cgroup_v1)
    for (const auto& h : hierarchies_)
      if (h.controllers.count("freezer")) return h.base + "/freezer.state";
  return {};
}

bool Containment::tree_frozen() const {
  std::string f = freeze_file(), text;
  if (f.empty()) return false;
  if (mode_ == ContainmentMode::cgroup_v2) {
    // cgroup.events says "frozen 1" once every process below is frozen.
    std::string events = f.substr(0, f.rfind('/')) + "/cgroup.events";
    return read_keyed(events, "frozen", 0) == 1;
  }
  // v1: FREEZING until every task below has stopped, then FROZEN.
  return read_text(f, text) && text.rfind("FROZEN", 0) == 0;
}

void Containment::count_members(FreezeOutcome& o) const {
  for (const auto& w : all_)
    if (auto cg = w.lock(); cg && !cg->removed_) {
      ++o.cgroups;
      int n = cg->population();
      if (n > 0 && cg->launcher_ && cg->launcher_->joined()) --n;  // a spare's launcher is no command's
      if (n > 0) o.processes += n;
    }
}

void Containment::freeze(uint64_t deadline_ms, std::function<void(FreezeOutcome)> done) {
  if (!can_freeze()) {
    FreezeOutcome o;
    o.status = 501;
    o.detail = std::string("cannot freeze in containment mode ") + containment_mode_name(mode_) +
               " (it needs cgroup v2, or a cgroup v1 freezer hierarchy)";
    return done(o);
  }
  if (frozen_ && freeze_waiters_.empty()) {
    FreezeOutcome o;
    o.ok = true;
    o.detail = "already frozen";
    count_members(o);
    return done(o);
  }
  freeze_waiters_.push_back(std::move(done));
  if (frozen_) return;  // a freeze under way answers this one too
  frozen_ = true;  // from here on no process starts
  frozen_since_ms_ = uv_now(loop_);
  freeze_deadline_ms_ = deadline_ms;
  auto listeners = freeze_listeners_;
  for (FreezeListener* l : listeners)
    if (freeze_listeners_.count(l)) l->on_freeze();
  if (!write_text(freeze_file(), mode_ == ContainmentMode::cgroup_v2 ? "1" : "FROZEN")) {
    FreezeOutcome o;
    o.status = 500;
    o.detail = "cannot write " + freeze_file() + ": " + strerror(errno);
    frozen_ = false;
    for (FreezeListener* l : listeners)
      if (freeze_listeners_.count(l)) l->on_thaw(0);
    auto waiters = std::move(freeze_waiters_);
    freeze_waiters_.clear();
    for (auto& w : waiters) w(o);
    return;
  }
  if (!freeze_timer_open_) {
    uv_timer_init(loop_, &freeze_timer_);
    freeze_timer_.data = this;
    freeze_timer_open_ = true;
  }
  // The kernel says when the tree is frozen only when asked: every
  // millisecond until then, or the deadline.
  uv_timer_start(&freeze_timer_, [](uv_timer_t* t) { static_cast<Containment*>(t->data)->on_freeze_poll(); }, 0, 1);
}

void Containment::on_freeze_poll() {
  uint64_t now = uv_now(loop_);
  FreezeOutcome o;
  o.took_ms = now - frozen_since_ms_;
  if (tree_frozen()) {
    o.ok = true;
    o.detail = "frozen";
    count_members(o);
  } else if (now >= freeze_deadline_ms_) {
    // Not all of it would stop (a process in uninterruptible sleep: I/O,
    // a FUSE mount): nothing stays half frozen.
    auto waiters = std::move(freeze_waiters_);
    freeze_waiters_.clear();
    thaw();
    freeze_waiters_ = std::move(waiters);
    o.status = 504;
    o.detail = "the kernel had not frozen every process after " + std::to_string(o.took_ms) +
               " ms (a process in uninterruptible sleep?); thawed again";
  } else {
    return;
  }
  uv_timer_stop(&freeze_timer_);
  auto waiters = std::move(freeze_waiters_);
  freeze_waiters_.clear();
  for (auto& w : waiters) w(o);
}

FreezeOutcome Containment::thaw() {
  FreezeOutcome o;
  if (!can_freeze()) {
    o.status = 501;
    o.detail = std::string("cannot freeze (or thaw) in containment mode ") + containment_mode_name(mode_);
    return o;
  }
  if (!frozen_) {
    o.ok = true;
    o.detail = "not frozen";
    count_members(o);
    return o;
  }
  if (!write_text(freeze_file(), mode_ == ContainmentMode::cgroup_v2 ? "0" : "THAWED")) {
    o.status = 500;
    o.detail = "cannot write " + freeze_file() + ": " + strerror(errno);
    return o;
  }
  uint64_t now = uv_now(loop_);
  o.took_ms = now - frozen_since_ms_;
  frozen_ = false;
  if (freeze_timer_open_) uv_timer_stop(&freeze_timer_);
  for (auto& x : lingering_)
    if (x.deadline_ms) x.deadline_ms += o.took_ms;
  auto listeners = freeze_listeners_;
  for (FreezeListener* l : listeners)
    if (freeze_listeners_.count(l)) l->on_thaw(o.took_ms);
  // A freeze still waiting for the kernel ends here.
  FreezeOutcome cut;
  cut.status = 409;
  cut.detail = "thawed before the freeze completed";
  auto waiters = std::move(freeze_waiters_);
  freeze_waiters_.clear();
  for (auto& w : waiters) w(cut);
  o.ok = true;
  o.detail = tree_frozen() ? "thaw requested; the kernel still reports frozen" : "thawed";
  count_members(o);
  return o;
}

}  // namespace execd::pty
