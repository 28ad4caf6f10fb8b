// execd/sessions/isolated: see header.
#include "execd/sessions/isolated.h"

#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstring>
#include <utility>

#include "execd/clock.h"
#include "execd/exec/formats.h"
#include "execd/ids.h"
#include "fs/ops.h"
#include "fs/pool_job.h"
#include "execd/runners/command.h"
#include "execd/runners/session.h"
#include "protocol/errors.h"
#include "pty/bash_session.h"
#include "pty/hardening.h"

namespace execd::sessions {

namespace codes = protocol::codes;
using http::Exchange;

namespace {
// Where a session's shell finds the run scripts (a read-only bind of the
// session's scripts directory into its /run tmpfs).
constexpr const char* kScriptsInside = "/run/execd-isolated";
constexpr uint64_t kSessionTickMs = 1000;
constexpr int64_t kStartDeadlineMs = 30000;
}  // namespace

IsolatedSession::~IsolatedSession() { pty::close_namespaces(entry); }

// --- the registry --------------------------------------------------------------

IsolatedRegistry::IsolatedRegistry(const Context& ctx, pty::Runtime& runtime, exec::LaunchPath& launches,
                                   watch::Hub& watches)
    : ctx_(ctx), runtime_(runtime), launches_(launches), watches_(watches) {
  uv_timer_init(ctx.loop, &tick_);
  tick_.data = this;
  uv_unref(reinterpret_cast<uv_handle_t*>(&tick_));
  // Sessions do not outlive execd: what an earlier one left goes, here at
  // start-up, before anything is served. On the pool it raced with the
  // first session's directories (one stat when nothing was left).
  (void)fs::remove_tree(ctx.config.state_dir + "/isolated");
}

IsolatedRegistry::~IsolatedRegistry() { clear(); }

const pty::Hardening* IsolatedRegistry::hardening() const { return runtime_.children.hardening(); }

const pty::IsolationProbe& IsolatedRegistry::probe() {
  if (!probe_) {
    if (!ctx_.config.isolation) {
      pty::IsolationProbe off;
      off.message = "isolated sessions are turned off (--no-isolation)";
      probe_ = off;
    } else {
      using Choice = Config::RootViewChoice;
      std::optional<pty::RootView> view;
      if (ctx_.config.isolated_root_view == Choice::idmapped) view = pty::RootView::idmapped;
      if (ctx_.config.isolated_root_view == Choice::masked) view = pty::RootView::masked;
      probe_ = pty::probe_isolation(ctx_.config.state_dir + "/isolated", view, view_skip());
      spdlog::info("isolated sessions: {}{}{}", probe_->available ? "available" : "unavailable",
                   probe_->message.empty() ? "" : ": ", probe_->message);
      if (probe_->available) {
        std::string plain;
        for (const std::string& m : probe_->not_idmapped) plain += (plain.empty() ? "" : ", ") + m;
        spdlog::info("isolated sessions: root view {} ({}{}{}); {}", pty::root_view_name(probe_->root_view),
                     probe_->root_view_message, plain.empty() ? "" : ": ", plain, probe_->namespaces_message);
      }
    }
  }
  return *probe_;
}

std::vector<std::string> IsolatedRegistry::view_skip() const {
  std::vector<std::string> skip{ctx_.config.state_dir};
  for (const char* const* p = pty::kReplacedPaths; *p; ++p) skip.emplace_back(*p);
  return skip;
}

std::vector<std::string> IsolatedRegistry::hidden_paths() const {
  std::vector<std::string> out{ctx_.config.state_dir};
  out.insert(out.end(), ctx_.config.secret_files.begin(), ctx_.config.secret_files.end());
  if (probe_ && probe_->root_view == pty::RootView::masked) {
    for (const char* const* p = pty::kMaskedPaths; *p; ++p) out.emplace_back(*p);
    out.emplace_back("/etc/ssh/*key*");
  }
  return out;
}

IsolatedSession* IsolatedRegistry::find(const std::string& id) {
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second.get();
}

void IsolatedRegistry::begin(std::shared_ptr<IsolatedSession> s) {
  s->begun_ms = uv_now(ctx_.loop);
  starting_[s->id] = std::move(s);
  if (!uv_is_active(reinterpret_cast<uv_handle_t*>(&tick_)) && !closed_)
    uv_timer_start(&tick_, [](uv_timer_t* t) { static_cast<IsolatedRegistry*>(t->data)->on_tick(); }, kSessionTickMs,
                   kSessionTickMs);
}

void IsolatedRegistry::activate(const std::shared_ptr<IsolatedSession>& s) {
  starting_.erase(s->id);
  sessions_[s->id] = s;
}

void IsolatedRegistry::abandon(const std::shared_ptr<IsolatedSession>& s) {
  starting_.erase(s->id);
  end(s);
}

void IsolatedRegistry::remove(const std::string& id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  std::shared_ptr<IsolatedSession> s = std::move(it->second);
  sessions_.erase(it);
  end(std::move(s));
}

void IsolatedRegistry::end(std::shared_ptr<IsolatedSession> s) {
  if (s->ended) return;
  s->ended = true;
  if (s->shell) {
    // Gone once reaped (a run still on ends with the shell's death).
    dying_[s->shell] = true;
    s->shell->kill_all();
    s->shell = nullptr;
  }
  // The kernel kills every process of the session with its PID 1.
  if (s->holder_alive) kill(s->holder, SIGKILL);
  pty::close_namespaces(s->entry);
  if (s->mount) watches_.end_namespace(s->mount.get());
  s->mount.reset();
  if (closed_) return;
  struct Sweep {
    std::string dir;
  };
  fs::queue_job<Sweep>(
      ctx_.loop, std::make_unique<Sweep>(Sweep{s->dir}), [](Sweep& w) { (void)fs::remove_tree(w.dir); },
      [](Sweep&, int) {});
  spdlog::info("isolated session {} ended", s->id);
}

void IsolatedRegistry::holder_exited(const std::string& id, pid_t pid) {
  for (auto* map : {&sessions_, &starting_}) {
    auto it = map->find(id);
    if (it != map->end() && it->second->holder == pid) {
      it->second->holder_alive = false;
      spdlog::warn("isolated session {}: its holder (pid {}) is gone; the session is dead", id, pid);
    }
  }
}

void IsolatedRegistry::shell_gone(const std::shared_ptr<IsolatedSession>& s, pty::BashSession* shell) {
  if (s && s->shell == shell) s->shell = nullptr;  // the session is dead from now on
  dying_.erase(shell);
  shell->destroy();
}

void IsolatedRegistry::on_tick() {
  int64_t now = unix_ns();
  std::vector<std::string> idle;
  for (auto& [id, s] : sessions_) {
    auto& bg = s->background;
    bg.erase(std::remove_if(bg.begin(), bg.end(),
                            [this](const std::string& run) {
                              exec::Execution* e = executions().find(run);
                              return !e || e->done();
                            }),
             bg.end());
    // A run on (foreground or background) keeps the session from idling.
    if ((s->shell && s->shell->busy()) || !bg.empty()) s->last_run_ns = now;
    int64_t timeout = s->spec.idle_timeout_seconds;
    if (timeout > 0 && now - s->last_run_ns >= timeout * 1000000000ll) idle.push_back(id);
  }
  for (const std::string& id : idle) {
    spdlog::info("isolated session {} idle for {} s: ended", id, find(id)->spec.idle_timeout_seconds);
    remove(id);
  }
  uint64_t now_ms = uv_now(ctx_.loop);
  std::vector<std::shared_ptr<IsolatedSession>> stuck;
  for (auto& [id, s] : starting_)
    if (now_ms - s->begun_ms > kStartDeadlineMs) stuck.push_back(s);
  for (auto& s : stuck) {
    if (http::Exchange* ex = s->create ? s->create->exchange() : nullptr)
      ex->respond_error(500, codes::kRuntimeError, "the session did not start within 30 s");
    abandon(s);
  }
  if (sessions_.empty() && starting_.empty()) uv_timer_stop(&tick_);
}

void IsolatedRegistry::remove_all() {
  std::vector<std::string> ids;
  for (const auto& [id, s] : sessions_) ids.push_back(id);
  for (const auto& id : ids) remove(id);
}

void IsolatedRegistry::kill_all() {
  for (auto* map : {&sessions_, &starting_})
    for (auto& [id, s] : *map) {
      if (s->shell) s->shell->kill_all();
      if (s->holder_alive) kill(s->holder, SIGKILL);
    }
  for (auto& [shell, unused] : dying_) shell->kill_all();
}

void IsolatedRegistry::clear() {
  if (closed_) return;
  closed_ = true;
  std::vector<std::string> dirs;
  for (auto* map : {&sessions_, &starting_}) {
    for (auto& [id, s] : *map) {
      dirs.push_back(s->dir);
      end(s);
    }
    map->clear();
  }
  std::map<pty::BashSession*, bool> shells = std::move(dying_);
  for (auto& [shell, unused] : shells) {
    shell->set_on_gone(nullptr);
    shell->destroy();
  }
  // At exit, on the loop: nothing else waits for it any more.
  for (const std::string& d : dirs) (void)fs::remove_tree(d);
  uv_timer_stop(&tick_);
  uv_close(reinterpret_cast<uv_handle_t*>(&tick_), nullptr);
}

namespace {

// --- creating a session --------------------------------------------------------

bool glob_match_upper(const std::string& name, const std::string& pattern) {
  std::string n = name, p = pattern;
  for (auto* s : {&n, &p})
    for (char& c : *s) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
  if (p.size() > 1 && p.front() == '*' && p.back() == '*') return n.find(p.substr(1, p.size() - 2)) != std::string::npos;
  if (!p.empty() && p.front() == '*') return n.size() >= p.size() - 1 && n.compare(n.size() - (p.size() - 1), p.size() - 1, p, 1) == 0;
  if (!p.empty() && p.back() == '*') return n.compare(0, p.size() - 1, p, 0, p.size() - 1) == 0;
  return n == p;
}

// The environment runs start from: execd's (minus its secrets) through the
// passthrough rule. Without one, or a deny rule without keys, variables
// that look like credentials stay out (upstream's list).
std::vector<std::string> session_env(const std::vector<std::string>& base, const protocol::IsolatedCreateRequest& r) {
  static const char* kCredentialPatterns[] = {"*_API_KEY", "*_TOKEN", "*_SECRET", "*_PASSWORD", "AWS_*",
                                              "ALI_*",     "ALIYUN_*", "K8S_*",    "KUBE_*"};
  std::vector<std::string> out;
  for (const std::string& kv : base) {
    std::string key = kv.substr(0, kv.find('='));
    bool listed = std::find(r.env_keys.begin(), r.env_keys.end(), key) != r.env_keys.end();
    bool keep;
    if (r.env_mode == "allow") {
      keep = listed;
    } else if (!r.env_keys.empty()) {
      keep = !listed;
    } else {
      keep = true;
      for (const char* p : kCredentialPatterns) keep &= !glob_match_upper(key, p);
    }
    if (keep) out.push_back(kv);
  }
  return out;
}

size_t depth(const std::string& path) {
  return path == "/" ? 0 : static_cast<size_t>(std::count(path.begin(), path.end(), '/'));
}

bool beneath(const std::string& path, const std::string& root) {
  return root == "/" || path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
                                        path[root.size()] == '/');
}

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  return realpath(p.c_str(), buf) ? std::string(buf) : std::string();
}

bool make_dirs(const std::string& path, std::optional<uint32_t> uid, std::optional<uint32_t> gid) {
  std::string cur;
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i != path.size() && path[i] != '/') continue;
    cur = path.substr(0, i);
    if (mkdir(cur.c_str(), 0755) == 0) {
      // Made for the session: it belongs to the session's user.
      if (uid && chown(cur.c_str(), *uid, gid.value_or(*uid)) != 0) return false;
    } else if (errno != EEXIST) {
      return false;
    }
  }
  return true;
}

// What the pool works out before the holder starts: every host path checked
// and made, the plan, or why not (a 400 or a 500).
struct PreparedSession {
  int status = 0;
  std::string error;
};

PreparedSession prepare_session(IsolatedSession& s, const std::vector<std::string>& allowed, const std::string& state_dir,
                                const std::vector<std::string>& view_skip) {
  auto bad = [](std::string why) { return PreparedSession{400, std::move(why)}; };
  auto fail = [](std::string why) { return PreparedSession{500, std::move(why)}; };
  const auto& r = s.spec;
  for (const std::string& d : {s.dir, s.dir + "/root", s.scripts}) {
    if (!make_dirs(d, std::nullopt, std::nullopt)) return fail("cannot make " + d + ": " + strerror(errno));
  }
  chmod(s.dir.c_str(), 0700);
  if (s.run_uid && chown(s.scripts.c_str(), *s.run_uid, s.run_gid.value_or(*s.run_uid)) != 0)
    return fail("cannot hand " + s.scripts + " to the session's user: " + strerror(errno));
  s.plan.staging = s.dir + "/root";
  s.plan.tmp_tmpfs = r.profile == "strict";
  s.plan.share_net = r.share_net;
  s.plan.hide = {state_dir};
  // What covers the secret files: empty, and unreadable to a process
  // without CAP_DAC_OVERRIDE, whatever its uid.
  s.plan.mask_source = s.dir + "/mask";
  int mask = open(s.plan.mask_source.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0);
  if (mask < 0 || fchmod(mask, 0) != 0) {
    int e = errno;
    if (mask >= 0) close(mask);
    return fail("cannot make " + s.plan.mask_source + ": " + strerror(e));
  }
  close(mask);
  if (s.plan.root_view == pty::RootView::idmapped) {
    // The host's mounts as they are now (a volume mounted since the last
    // session is in this one's view).
    s.plan.host_mounts = pty::host_mount_points(view_skip);
  } else {
    glob_t keys{};
    if (glob("/etc/ssh/*key*", GLOB_NOSORT, nullptr, &keys) == 0)
      for (size_t i = 0; i < keys.gl_pathc; ++i) s.plan.mask_files.emplace_back(keys.gl_pathv[i]);
    globfree(&keys);
  }
  if (r.uid_mode == "userns")
    s.plan.userns = std::pair<uint32_t, uint32_t>{r.uid.value_or(geteuid()), r.gid.value_or(r.uid.value_or(getegid()))};
  std::vector<std::string> allowed_real;
  for (const std::string& a : allowed)
    if (std::string real = real_path(a); !real.empty()) allowed_real.push_back(real);
  auto allowed_source = [&](const std::string& src, std::string& resolved) -> std::optional<std::string> {
    resolved = real_path(src);
    if (resolved.empty()) return src + " must be an existing path (" + strerror(errno) + ")";
    for (const std::string& a : allowed_real)
      if (beneath(resolved, a)) return std::nullopt;
    return src + " is not in the allowlist (--isolated-allowed-paths)";
  };
  // The session's own tmpfs (/run, /root; /tmp under profile strict)
  // starts empty: a mount point there is made, whatever the host has.
  auto in_session_tmpfs = [&](const std::string& target) {
    return beneath(target, "/run") || beneath(target, "/root") || (s.plan.tmp_tmpfs && beneath(target, "/tmp"));
  };
  std::vector<pty::SessionMount> mounts;
  size_t k = 0;
  for (const auto& o : r.overlays) {
    ++k;
    struct stat st {};
    if (stat(o.path.c_str(), &st) != 0) {
      // As upstream: a workspace that does not exist is made (here, for the
      // session's user when it runs as one).
      if (!make_dirs(o.path, s.run_uid, s.run_gid) || stat(o.path.c_str(), &st) != 0)
        return fail("cannot create " + o.path + ": " + strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) return bad("overlay path " + o.path + " is not a directory");
    pty::SessionMount m;
    m.source = o.path;
    m.target = o.path;
    // Beneath the session's own tmpfs (/run; /tmp under profile strict)
    // the mount point is made in it.
    m.create_target = in_session_tmpfs(o.path);
    if (o.mode == "rw") {
      m.kind = pty::SessionMount::Kind::bind_rw;
      s.writable.push_back(o.path);
    } else if (o.mode == "ro") {
      m.kind = pty::SessionMount::Kind::bind_ro;
    } else if (o.persistent()) {
      m.kind = pty::SessionMount::Kind::overlay;
      std::string layer = s.dir + "/layers/" + std::to_string(k);
      m.upper = layer + "/upper";
      m.work = layer + "/work";
      if (!make_dirs(m.upper, std::nullopt, std::nullopt) || !make_dirs(m.work, std::nullopt, std::nullopt))
        return fail("cannot make " + layer + ": " + strerror(errno));
      // The merged root shows the upper's owner and mode: the lower's.
      if (chown(m.upper.c_str(), st.st_uid, st.st_gid) != 0 || chmod(m.upper.c_str(), st.st_mode & 07777) != 0)
        return fail("cannot set up " + m.upper + ": " + strerror(errno));
      s.layers.push_back({o.path, m.upper});
      s.writable.push_back(o.path);
    } else {
      m.kind = pty::SessionMount::Kind::overlay_tmpfs;
      m.upper = s.dir + "/ephemeral-" + std::to_string(k);
      if (!make_dirs(m.upper, std::nullopt, std::nullopt)) return fail("cannot make " + m.upper);
      m.upper_uid = st.st_uid;
      m.upper_gid = st.st_gid;
      m.upper_mode = st.st_mode & 07777;
      s.writable.push_back(o.path);
    }
    mounts.push_back(std::move(m));
  }
  // Where a missing mount point may be made: in the session's own tmpfs
  // (/run, /root, /tmp under profile strict) or in a writable overlay.
  auto can_create_under = [&](const std::string& target) {
    if (in_session_tmpfs(target)) return true;
    for (const auto& o : r.overlays)
      if (o.mode != "ro" && beneath(target, o.path) && target != o.path) return true;
    return false;
  };
  auto add_bind = [&](const std::string& source, const std::string& target, bool readonly,
                      const char* what) -> std::optional<std::string> {
    std::string resolved;
    if (auto e = allowed_source(source, resolved)) return std::string(what) + " source " + *e;
    struct stat st {};
    stat(resolved.c_str(), &st);
    pty::SessionMount m;
    m.kind = readonly ? pty::SessionMount::Kind::bind_ro : pty::SessionMount::Kind::bind_rw;
    m.source = resolved;
    m.target = target;
    m.source_is_file = !S_ISDIR(st.st_mode);
    struct stat tst {};
    if (in_session_tmpfs(target)) {
      m.create_target = true;
    } else if (lstat(target.c_str(), &tst) != 0) {
      if (!can_create_under(target))
        return std::string(what) + " destination " + target +
               " does not exist, and the session's root is read-only: use an existing path, or one under /run, "
               "/tmp (profile strict) or a writable overlay";
      m.create_target = true;
    } else if (S_ISDIR(tst.st_mode) != S_ISDIR(st.st_mode)) {
      return std::string(what) + " destination " + target + " and source " + source +
             " must both be directories or both be files";
    }
    if (!readonly) s.writable.push_back(target);
    mounts.push_back(std::move(m));
    return std::nullopt;
  };
  for (const std::string& p : r.extra_writable)
    if (auto e = add_bind(p, p, false, "extra_writable")) return bad(*e);
  for (const auto& b : r.binds)
    if (auto e = add_bind(b.source, b.target(), b.readonly, "bind")) return bad(*e);
  // The shell's run scripts.
  pty::SessionMount scripts;
  scripts.kind = pty::SessionMount::Kind::bind_ro;
  scripts.source = s.scripts;
  scripts.target = kScriptsInside;
  scripts.create_target = true;
  mounts.push_back(std::move(scripts));
  // Shallow first, so a deeper mount lands on (and shadows part of) a shallower one.
  std::stable_sort(mounts.begin(), mounts.end(),
                   [](const pty::SessionMount& a, const pty::SessionMount& b) { return depth(a.target) < depth(b.target); });
  s.plan.mounts = std::move(mounts);
  return {};
}

void fail_creation(IsolatedRegistry& reg, const std::shared_ptr<IsolatedSession>& s, int status, const std::string& why) {
  spdlog::warn("isolated session {} could not start: {}", s->id, why);
  if (Exchange* ex = s->create ? s->create->exchange() : nullptr)
    ex->respond_error(status, status == 400 ? codes::kInvalidRequestBody : codes::kRuntimeError, why);
  reg.abandon(s);
}


// The last step: the session's shell, inside it.
void start_shell(IsolatedRegistry& reg, const std::shared_ptr<IsolatedSession>& s) {
  const Context& ctx = reg.ctx();
  auto* shell = new pty::BashSession(reg.runtime(), s->scripts, "run");
  shell->isolate(&s->entry, s->run_uid, s->run_gid, kScriptsInside);
  std::string err;
  if (!shell->start(ctx.shell, s->env, s->cwd, err)) {
    shell->destroy();
    return fail_creation(reg, s, 500, "cannot start the session's shell: " + err);
  }
  s->shell = shell;
  std::weak_ptr<IsolatedSession> weak = s;
  shell->set_on_gone([&reg, weak, shell] { reg.shell_gone(weak.lock(), shell); });
  s->created_ns = s->last_run_ns = unix_ns();
  reg.activate(s);
  spdlog::info("isolated session {} started: holder pid {}, {} mounts, profile {}, uid_mode {}", s->id, s->holder,
               s->plan.mounts.size(), s->spec.profile, s->spec.uid_mode);
  Exchange* ex = s->create ? s->create->exchange() : nullptr;
  auto created = ex ? std::move(s->create->created) : nullptr;
  s->create.reset();
  if (!ex) {
    // The client left: nobody knows the session; it goes.
    reg.remove(s->id);
    return;
  }
  created(*ex, *s);
}

// The holder is ready: its namespaces open, a Landlock ruleset of the
// session's own (built inside it) if the floor has one, then the shell.
void holder_ready(IsolatedRegistry& reg, const std::shared_ptr<IsolatedSession>& s) {
  std::string err;
  if (!pty::open_namespaces(s->holder, !s->spec.share_net, s->spec.uid_mode == "userns", s->entry, err))
    return fail_creation(reg, s, 500, err);
  int mnt = dup(s->entry.mnt);
  if (mnt < 0) return fail_creation(reg, s, 500, std::string("dup: ") + strerror(errno));
  fcntl(mnt, F_SETFD, FD_CLOEXEC);
  s->mount = std::make_shared<const pty::MountNamespace>(mnt);
  const pty::Hardening* h = reg.hardening();
  if (!h || !h->landlock_on()) return start_shell(reg, s);
  struct RulesetJob {
    IsolatedRegistry* reg;
    std::shared_ptr<IsolatedSession> s;
    std::shared_ptr<const pty::MountNamespace> mount;
    std::vector<std::string> writable;
    const pty::Hardening* hardening;
    int fd = -1, err = 0;
  };
  fs::queue_job<RulesetJob>(
      reg.ctx().loop, std::make_unique<RulesetJob>(RulesetJob{&reg, s, s->mount, s->writable, h}),
      [](RulesetJob& j) {
        pty::MountScope scope(j.mount->fd);
        if ((j.err = scope.error())) return;
        j.fd = j.hardening->make_landlock_ruleset(j.writable);
        if (j.fd < 0) j.err = errno;
      },
      [](RulesetJob& j, int) {
        if (j.fd < 0 || j.s->ended) {
          if (j.fd >= 0) close(j.fd);
          if (!j.s->ended)
            fail_creation(*j.reg, j.s, 500, std::string("cannot build the session's Landlock ruleset: ") + strerror(j.err));
          return;
        }
        j.s->entry.landlock = j.fd;
        start_shell(*j.reg, j.s);
      });
}

// Reads the holder's "ok" (or its error) without blocking the loop.
struct ReadyWatch {
  uv_poll_t poll;
  IsolatedRegistry* reg;
  std::shared_ptr<IsolatedSession> s;
  int fd;
  std::string text;

  void finish() {
    uv_poll_stop(&poll);
    close(fd);
    uv_close(reinterpret_cast<uv_handle_t*>(&poll), [](uv_handle_t* h) { delete static_cast<ReadyWatch*>(h->data); });
  }
};

void watch_ready(IsolatedRegistry& reg, const std::shared_ptr<IsolatedSession>& s, int fd) {
  auto* w = new ReadyWatch{{}, &reg, s, fd, {}};
  uv_poll_init(reg.ctx().loop, &w->poll, fd);
  w->poll.data = w;
  uv_poll_start(&w->poll, UV_READABLE, [](uv_poll_t* p, int status, int) {
    auto* w = static_cast<ReadyWatch*>(p->data);
    char buf[512];
    ssize_t n = 0;
    while (status == 0 && (n = read(w->fd, buf, sizeof buf)) > 0 && w->text.size() < 4096) w->text.append(buf, n);
    if (status == 0 && n < 0 && (errno == EAGAIN || errno == EINTR) && w->text.find('\n') == std::string::npos)
      return;  // more to come
    std::string text = std::move(w->text);
    std::shared_ptr<IsolatedSession> s = std::move(w->s);
    IsolatedRegistry& reg = *w->reg;
    w->finish();
    if (s->ended) return;
    if (text.rfind("ok\n", 0) == 0) return holder_ready(reg, s);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    fail_creation(reg, s, 500, "the session's init failed: " + (text.empty() ? std::string("it exited") : text));
  });
}

}  // namespace

void IsolatedRegistry::create(Exchange& client, protocol::IsolatedCreateRequest req,
                              std::function<void(Exchange&, const IsolatedSession&)> created) {
  const pty::IsolationProbe& p = probe();
  auto s = std::make_shared<IsolatedSession>();
  s->id = random_uuid();
  s->spec = std::move(req);
  s->dir = ctx_.config.state_dir + "/isolated/" + s->id;
  s->scripts = s->dir + "/scripts";
  s->cwd = s->spec.overlays.front().path;
  s->env = session_env(ctx_.base_env, s->spec);
  if (s->spec.uid_mode == "setpriv" && (s->spec.uid || s->spec.gid)) {
    s->run_uid = s->spec.uid.value_or(geteuid());
    s->run_gid = s->spec.gid.value_or(s->spec.uid ? *s->spec.uid : getegid());
  }
  // The host's root as the probe found it can be seen (pty/namespaces RootView).
  s->plan.root_view = p.root_view;
  s->plan.idmap_userns = p.idmap_userns;
  s->plan.mask_files = ctx_.config.secret_files;
  if (p.root_view == pty::RootView::masked)
    for (const char* const* m = pty::kMaskedPaths; *m; ++m) s->plan.mask_files.emplace_back(*m);
  s->plan.refuse_namespaces = s->entry.refuse_namespaces = p.refuses_namespaces;
  s->create = std::make_unique<CreateWait>();
  s->create->created = std::move(created);
  http::await(client, *s->create);
  begin(s);
  struct PrepareJob {
    IsolatedRegistry* reg;
    std::shared_ptr<IsolatedSession> s;
    std::vector<std::string> allowed;
    std::string state_dir;
    std::vector<std::string> view_skip;
    PreparedSession result;
  };
  // The pool touches only the session's plan and paths until it is back.
  fs::queue_job<PrepareJob>(
      ctx_.loop,
      std::make_unique<PrepareJob>(
          PrepareJob{this, s, ctx_.config.isolated_allowed_paths, ctx_.config.state_dir, view_skip(), {}}),
      [](PrepareJob& j) { j.result = prepare_session(*j.s, j.allowed, j.state_dir, j.view_skip); },
      [](PrepareJob& j, int) {
        IsolatedRegistry& reg = *j.reg;
        auto& s = j.s;
        if (s->ended) return;
        if (j.result.status) return fail_creation(reg, s, j.result.status, j.result.error);
        if (!s->create || !s->create->exchange()) return reg.abandon(s);  // nobody waits for it
        pty::Holder holder;
        std::string err;
        if (pty::start_holder(s->plan, reg.runtime().children, holder, err) != 0) {
          reg.runtime().reaper.reap();
          return fail_creation(reg, s, 500, "cannot build the session: " + err);
        }
        s->holder = holder.pid;
        s->holder_alive = true;
        std::string id = s->id;
        reg.runtime().reaper.watch(holder.pid, [&reg, id, pid = holder.pid](const pty::ExitInfo&) {
          reg.holder_exited(id, pid);
        });
        watch_ready(reg, s, holder.ready_fd);
      });
}

const char* untrackable_root(const IsolatedSession& s, const std::string& root) {
  for (const auto& o : s.spec.overlays)
    if (beneath(root, o.path) && o.mode == "ro") return "it lies in a read-only mount";
  for (const auto& b : s.spec.binds)
    if (beneath(root, b.target()) && b.readonly) return "it lies in a read-only bind";
  return nullptr;
}

// --- runs ----------------------------------------------------------------------

namespace {

std::string shell_quote(const std::string& v) {
  std::string out = "'";
  for (char c : v) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

protocol::ApiError session_gone(const std::string& id) {
  return {404, "SESSION_NOT_FOUND", "session " + id + " not found"};
}

protocol::ApiError session_exited(const std::string& id) {
  return {410, "SESSION_EXITED", "session " + id + " has exited; delete it and create a new one"};
}

// A run in the session's shell, so shell state persists between runs.
class ForegroundStart final : public exec::RunStart {
 public:
  ForegroundStart(IsolatedRegistry& reg, const IsolatedSession& s, const protocol::IsolatedRunRequest& r,
                  protocol::Framing framing)
      : reg_(reg), session_(s.id), timeout_ms_(r.timeout_seconds * 1000), framing_(framing) {
    // envs: exported in a subshell for this run only (as upstream).
    code_ = r.code;
    if (!r.envs.empty()) {
      std::string wrapped = "(\n";
      for (const auto& [k, v] : r.envs) wrapped += "export " + k + "=" + shell_quote(v) + "\n";
      wrapped += code_;
      if (wrapped.back() != '\n') wrapped += '\n';
      code_ = wrapped + ")";
    }
    if (s.run_uid) owner_ = std::pair<uid_t, gid_t>{*s.run_uid, s.run_gid.value_or(*s.run_uid)};
    if (s.shell) {
      file_ = s.shell->next_run_file();
      shell_pid_ = s.shell->shell_pid();
    }
  }
  // A run that never starts (the client left, the session went) leaves no script.
  ~ForegroundStart() override { pty::BashSession::discard(prepared_); }

  std::optional<protocol::ApiError> admission() override { return refusal(); }
  bool prepare_blocks() const override { return true; }
  std::optional<protocol::ApiError> prepare() override {
    prepared_ = pty::BashSession::prepare_run(file_, shell_pid_, code_, timeout_ms_, owner_);
    return std::nullopt;
  }
  watch::MountRef track_mount() const override {
    IsolatedSession* s = reg_.find(session_);
    return s ? s->mount : nullptr;
  }
  // The session may have gone or become busy while the jobs ran.
  std::optional<protocol::ApiError> recheck() override { return refusal(); }
  std::unique_ptr<exec::StreamFormat> stream_format(http::Exchange&) override {
    return exec::envelope_format(framing_, exec::kind_traits(exec::Kind::isolated_run).split_lines);
  }
  bool start_failure_refuses() const override { return true; }
  std::unique_ptr<exec::Runner> start(exec::Execution& e, std::string& error) override {
    IsolatedSession& s = *reg_.find(session_);
    auto runner = std::make_unique<runners::SessionRunner>(e, *s.shell);
    auto status = s.shell->run(std::exchange(prepared_, {}), "", timeout_ms_, runner.get(), error);
    if (status == pty::BashSession::RunStatus::started) return runner;
    error = "error running in the session: " + error;
    return nullptr;
  }
  void started(exec::Execution&, http::Exchange*) override { reg_.find(session_)->last_run_ns = unix_ns(); }

 private:
  std::optional<protocol::ApiError> refusal() {
    IsolatedSession* s = reg_.find(session_);
    if (!s) return session_gone(session_);
    if (s->dead()) return session_exited(session_);
    if (s->shell->busy())
      return protocol::ApiError{409, "SESSION_BUSY", "session " + session_ + " is already running a foreground run"};
    return std::nullopt;
  }

  IsolatedRegistry& reg_;
  std::string session_, code_;
  int64_t timeout_ms_;
  protocol::Framing framing_;
  std::optional<std::pair<uid_t, gid_t>> owner_;
  std::string file_;
  pid_t shell_pid_ = -1;
  pty::BashSession::PreparedRun prepared_;
};

// A process of its own in the session's namespaces: it starts while the
// session's holder lives, even when its shell is gone.
class BackgroundStart final : public exec::RunStart {
 public:
  using Accepted = std::function<void(http::Exchange&, const IsolatedSession&, const exec::Execution&)>;
  BackgroundStart(IsolatedRegistry& reg, const protocol::IsolatedRunRequest& r, std::string session, Accepted accepted)
      : reg_(reg), session_(std::move(session)), code_(r.code), envs_(r.envs), accepted_(std::move(accepted)) {}

  std::optional<protocol::ApiError> admission() override { return refusal(); }
  watch::MountRef track_mount() const override {
    IsolatedSession* s = reg_.find(session_);
    return s ? s->mount : nullptr;
  }
  std::optional<protocol::ApiError> recheck() override { return refusal(); }
  // The answer is the 202 of started(), not a stream.
  std::unique_ptr<exec::StreamFormat> stream_format(http::Exchange&) override { return nullptr; }
  bool start_failure_refuses() const override { return true; }
  std::unique_ptr<exec::Runner> start(exec::Execution& e, std::string& error) override {
    IsolatedSession& s = *reg_.find(session_);
    const Context& ctx = reg_.ctx();
    pty::SpawnOptions opts;
    opts.program = ctx.shell;
    opts.argv = {ctx.shell, "-c", code_};
    opts.env = s.env;
    for (const auto& [k, v] : envs_) pty::set_env(opts.env, k, v);
    opts.cwd = s.cwd;
    opts.uid = s.run_uid;
    opts.gid = s.run_gid;
    opts.isolated = &s.entry;
    pty::CommandLimits limits;  // not time-limited, as upstream
    limits.kill_grace_ms = ctx.config.kill_grace_ms;
    auto runner = runners::CommandRunner::start(reg_.runtime(), opts, limits, false, e, error);
    if (!runner) error = "cannot start the run: " + error;
    return runner;
  }
  void started(exec::Execution& e, http::Exchange* client) override {
    IsolatedSession& s = *reg_.find(session_);
    s.background.push_back(e.id());
    s.last_run_ns = unix_ns();
    if (client) accepted_(*client, s, e);
  }

 private:
  std::optional<protocol::ApiError> refusal() {
    IsolatedSession* s = reg_.find(session_);
    if (!s) return session_gone(session_);
    if (!s->holder_alive) return session_exited(session_);
    return std::nullopt;
  }

  IsolatedRegistry& reg_;
  std::string session_, code_;
  decltype(protocol::IsolatedRunRequest::envs) envs_;
  Accepted accepted_;
};

}  // namespace

std::unique_ptr<exec::RunStart> foreground_run(IsolatedRegistry& reg, const std::string& session,
                                               const protocol::IsolatedRunRequest& r, protocol::Framing framing) {
  return std::make_unique<ForegroundStart>(reg, *reg.find(session), r, framing);
}

std::unique_ptr<exec::RunStart> background_run(
    IsolatedRegistry& reg, const std::string& session, const protocol::IsolatedRunRequest& r,
    std::function<void(http::Exchange&, const IsolatedSession&, const exec::Execution&)> accepted) {
  return std::make_unique<BackgroundStart>(reg, r, session, std::move(accepted));
}

exec::ExecutionSpec run_spec(const IsolatedSession& s, const protocol::IsolatedRunRequest& r) {
  exec::ExecutionSpec spec;
  spec.kind = exec::Kind::isolated_run;
  spec.id = random_uuid();
  spec.content = r.code;
  spec.fingerprint = "isolated-run";
  spec.uid = s.run_uid;
  spec.gid = s.run_gid;
  spec.owner = s.id;
  spec.track_changes = r.track_changes;
  if (r.background) {
    spec.cwd = s.cwd;
    spec.background = true;
  }
  return spec;
}

}  // namespace execd::sessions
