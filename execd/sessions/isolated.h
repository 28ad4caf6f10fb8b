// execd/sessions/isolated: isolated sessions (OSEP-0013), the owner behind
// the /v1/isolated routes (execd/api/isolated, isolated_runs). A session is a
// set of namespaces and a file system view built by pty/namespaces (held by
// its holder process) with one long-lived bash inside (pty::BashSession,
// entered through pty/confine). Here: what a session holds, how one is
// built (its host paths checked and made on the pool, the holder, its
// namespaces, a Landlock ruleset of its own, the shell), its idle timeout,
// and its end. Its runs are executions of kind isolated_run: a foreground
// run goes to that bash (runners/session's SessionRunner, so shell state
// persists between runs), a background run is a process of its own in the
// same namespaces (runners/command's CommandRunner).
//
// The registry owns every session from POST until DELETE (or its idle
// timeout, or execd's exit). Loop thread only; pool jobs hold a session by
// shared_ptr and touch it only back on the loop.
#pragma once

#include <uv.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "execd/context.h"
#include "execd/exec/launch.h"
#include "execd/exec/registry.h"
#include "execd/http/awaiter.h"
#include "execd/watch/watch.h"
#include "fs/layer.h"
#include "protocol/isolated.h"
#include "pty/namespaces.h"
#include "pty/runtime.h"

namespace execd::pty {
class BashSession;
class Hardening;
}

namespace execd::sessions {

struct IsolatedSession;

// What the handlers keep with a session for as long as it lives (its file
// service): theirs, so that this room needs nothing of api/.
struct SessionAttachment {
  virtual ~SessionAttachment() = default;
};

// The client waiting for a session's creation: answered once, on the loop,
// by `created` when the session is active, or with the error.
struct CreateWait : http::Awaitable {
  std::function<void(http::Exchange&, const IsolatedSession&)> created;
};

struct IsolatedSession {
  std::string id;
  protocol::IsolatedCreateRequest spec;
  std::string dir;      // <state dir>/isolated/<id>: staging root, uppers, scripts
  std::string scripts;  // run scripts on the host (kScriptsInside in the session)
  std::string cwd;      // the first overlay: where the shell and background runs start
  std::vector<std::string> env;
  std::optional<uint32_t> run_uid, run_gid;  // uid_mode setpriv: the identity runs take
  std::vector<fs::LayerSource> layers;       // persistent overlays, for diff and commit
  std::vector<std::string> writable;         // what the session may write (its Landlock ruleset)
  pty::SessionPlan plan;
  pty::IsolatedEntry entry;
  std::shared_ptr<const pty::MountNamespace> mount;
  std::unique_ptr<SessionAttachment> files;
  pid_t holder = -1;
  bool holder_alive = false;
  pty::BashSession* shell = nullptr;
  int64_t created_ns = 0, last_run_ns = 0;
  uint64_t begun_ms = 0;
  std::vector<std::string> background;  // running background runs (pruned by the tick)
  std::unique_ptr<CreateWait> create;
  bool ended = false;

  ~IsolatedSession();
  bool dead() const { return !holder_alive || !shell; }
  const char* status() const { return dead() ? "destroyed" : "active"; }  // upstream's words
};

// Why `root` cannot be tracked in `s`, or nullptr. The watch is made inside
// the session's mount namespace, so a root is a path as the session sees it
// and the kernel reports changes made through its overlays and binds alike.
// Only a root in a read-only mount is refused: nothing can change there,
// and an empty list would read as "nothing changed".
const char* untrackable_root(const IsolatedSession& s, const std::string& root);

class IsolatedRegistry;

// A run's start through exec::LaunchPath (the one way in: admission, the id,
// track_changes inside the session's mount namespace, the first reader).
// The session must be there and alive (a foreground run: its shell idle)
// when asked and again when it starts. A foreground run goes to the
// session's shell and streams in `framing`; a background run is a process of
// its own in the session's namespaces, and `accepted` answers the client
// once it started (the 202). Start failures are 500s.
std::unique_ptr<exec::RunStart> foreground_run(IsolatedRegistry& reg, const std::string& session,
                                               const protocol::IsolatedRunRequest& r, protocol::Framing framing);
std::unique_ptr<exec::RunStart> background_run(
    IsolatedRegistry& reg, const std::string& session, const protocol::IsolatedRunRequest& r,
    std::function<void(http::Exchange&, const IsolatedSession&, const exec::Execution&)> accepted);
// The spec of a run of `s` (kind isolated_run, a fresh id).
exec::ExecutionSpec run_spec(const IsolatedSession& s, const protocol::IsolatedRunRequest& r);

class IsolatedRegistry {
 public:
  IsolatedRegistry(const Context& ctx, pty::Runtime& runtime, exec::LaunchPath& launches, watch::Hub& watches);
  ~IsolatedRegistry();
  IsolatedRegistry(const IsolatedRegistry&) = delete;
  IsolatedRegistry& operator=(const IsolatedRegistry&) = delete;

  const Context& ctx() const { return ctx_; }
  pty::Runtime& runtime() { return runtime_; }
  exec::Registry& executions() { return launches_.executions(); }
  exec::LaunchPath& launches() { return launches_; }
  watch::Hub& watches() { return watches_; }
  const pty::Hardening* hardening() const;

  // What this kernel allows, found out at the first call (a trial holder).
  const pty::IsolationProbe& probe();
  // Host paths a session's view does not rebuild from the host's mounts
  // (what it replaces, execd's state directory).
  std::vector<std::string> view_skip() const;
  // What every session hides (the state directory, token files, and with a
  // masked root view the masked paths), as reported: globs unexpanded.
  std::vector<std::string> hidden_paths() const;
  // Sessions held: those starting, those running and those still going.
  size_t count() const { return sessions_.size() + starting_.size(); }
  IsolatedSession* find(const std::string& id);
  const std::map<std::string, std::shared_ptr<IsolatedSession>>& sessions() const { return sessions_; }

  // Builds a session for `req` (the probe's refusals and admission are the
  // caller's): its host paths checked and made on the pool, then its holder,
  // namespaces, ruleset and shell. `client` waits and is answered once
  // (`created`, or a 400/500 error); a client that leaves lets it go.
  void create(http::Exchange& client, protocol::IsolatedCreateRequest req,
              std::function<void(http::Exchange&, const IsolatedSession&)> created);

  // Creation steps (sessions/isolated.cc).
  void begin(std::shared_ptr<IsolatedSession> s);
  void activate(const std::shared_ptr<IsolatedSession>& s);
  void abandon(const std::shared_ptr<IsolatedSession>& s);
  // Ends a session: everything in it is killed, its directory removed.
  void remove(const std::string& id);

  // The reaper's word: a session's holder (its PID 1) exited, so everything
  // in it is gone; and a shell that was reaped.
  void holder_exited(const std::string& id, pid_t pid);
  void shell_gone(const std::shared_ptr<IsolatedSession>& s, pty::BashSession* shell);

  // remove() of every running session (POST /internal/init's reset;
  // sessions still being set up are not touched).
  void remove_all();
  // Daemon shutdown: every session's processes die; then let go of all.
  void kill_all();
  void clear();

 private:
  void on_tick();
  void end(std::shared_ptr<IsolatedSession> s);

  const Context& ctx_;
  pty::Runtime& runtime_;
  exec::LaunchPath& launches_;
  watch::Hub& watches_;
  std::optional<pty::IsolationProbe> probe_;
  std::map<std::string, std::shared_ptr<IsolatedSession>> sessions_;
  std::map<std::string, std::shared_ptr<IsolatedSession>> starting_;
  // Shells of ended sessions, until they are reaped.
  std::map<pty::BashSession*, bool> dying_;
  uv_timer_t tick_;
  bool closed_ = false;
};

}  // namespace execd::sessions
