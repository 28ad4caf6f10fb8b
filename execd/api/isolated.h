// execd/api/isolated: the /v1/isolated API (OSEP-0013, the opensandbox 1.1.1
// client's isolated_execution routes). A session is a set of namespaces and
// a file system view built by pty/namespaces (held by its holder process)
// with one long-lived bash inside (pty::BashSession, entered through
// pty/confine). Its runs are executions of kind isolated_run: a foreground
// run goes to that bash (runners/session's SessionRunner, so shell state
// persists between runs), a background run is a process of its own in the
// same namespaces (runners/command's CommandRunner); both get ids, resume,
// status, records, the journal and --max-running like any run. Its files
// are the file routes, run on pool threads inside its mount namespace
// (FileService::mount). diff and commit read its overlays' upper
// directories (api/isolated_layers).
//
// The registry owns every session from POST until DELETE (or its idle
// timeout, or execd's exit). Loop thread only; pool jobs hold a session by
// shared_ptr and touch it only back on the loop.
#pragma once

#include <uv.h>

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "execd/api/file_jobs.h"
#include "execd/context.h"
#include "execd/exec/registry.h"
#include "execd/routes.h"
#include "execd/watch/watch.h"
#include "pty/namespaces.h"
#include "pty/runtime.h"

namespace execd::pty {
class BashSession;
class Hardening;
}

namespace execd::api {

struct IsolatedSession;

class IsolatedRegistry {
 public:
  IsolatedRegistry(const Context& ctx, pty::Runtime& runtime, exec::Registry& executions, FileService& files,
                   watch::Hub& watches);
  ~IsolatedRegistry();
  IsolatedRegistry(const IsolatedRegistry&) = delete;
  IsolatedRegistry& operator=(const IsolatedRegistry&) = delete;

  const Context& ctx() const { return ctx_; }
  pty::Runtime& runtime() { return runtime_; }
  exec::Registry& executions() { return executions_; }
  FileService& files() { return files_; }
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

  // Creation steps (api/isolated.cc).
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
  exec::Registry& executions_;
  FileService& files_;
  watch::Hub& watches_;
  std::optional<pty::IsolationProbe> probe_;
  std::map<std::string, std::shared_ptr<IsolatedSession>> sessions_;
  std::map<std::string, std::shared_ptr<IsolatedSession>> starting_;
  // Shells of ended sessions, until they are reaped.
  std::map<pty::BashSession*, bool> dying_;
  uv_timer_t tick_;
  bool closed_ = false;
};

void add_isolated_routes(RouteTable& routes, IsolatedRegistry& isolated);

}  // namespace execd::api
