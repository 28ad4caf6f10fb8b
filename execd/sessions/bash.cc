// execd/sessions/bash: see header.
#include "execd/sessions/bash.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "execd/ids.h"
#include "execd/runners/session.h"
#include "pty/bash_session.h"

namespace execd::sessions {

SessionRegistry::SessionRegistry(const Context& ctx, pty::Runtime& runtime, exec::LaunchPath& launches)
    : ctx_(ctx), runtime_(runtime), launches_(launches) {}

size_t SessionRegistry::busy() const {
  size_t n = 0;
  for (const auto& [id, e] : entries_)
    if (e->shell && e->shell->busy()) ++n;
  return n;
}

SessionRegistry::~SessionRegistry() = default;

SessionEntry* SessionRegistry::create(const std::string& cwd, const std::vector<std::string>& env, std::string& error) {
  auto e = std::make_unique<SessionEntry>();
  e->id = random_uuid();
  auto* shell = new pty::BashSession(runtime_, ctx_.config.state_dir, "session-" + e->id);
  if (!shell->start(ctx_.shell, env, cwd, error)) {
    shell->destroy();
    return nullptr;
  }
  SessionEntry* raw = e.get();
  e->shell = shell;
  shell->set_on_gone([this, id = raw->id, shell] { gone(id, shell); });
  entries_[raw->id] = std::move(e);
  return raw;
}

std::string SessionRegistry::latest_run(const std::string& id) {
  SessionEntry* e = find(id);
  return e ? e->last_run : std::string();
}

SessionEntry* SessionRegistry::find(const std::string& id) {
  auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : it->second.get();
}

void SessionRegistry::remove(const std::string& id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  pty::BashSession* shell = it->second->shell;
  // A run still on stays registered with the shell until its last callback,
  // which reports the shell's death.
  entries_.erase(it);
  if (!shell) return;
  // Everything the session started dies; the shell object goes once the
  // shell has been reaped (a running run's stream ends first, with -1).
  dying_[shell] = true;
  shell->kill_all();
}

void SessionRegistry::gone(const std::string& id, pty::BashSession* shell) {
  if (auto it = entries_.find(id); it != entries_.end() && it->second->shell == shell) {
    it->second->shell = nullptr;
    it->second->dead = true;
  }
  dying_.erase(shell);
  shell->destroy();
}

InterruptResult SessionRegistry::interrupt_run(const std::string& id) {
  SessionEntry* e = find(id);
  if (!e) return InterruptResult::not_found;
  if (!e->shell || !e->shell->interrupt()) return InterruptResult::not_running;
  return InterruptResult::interrupted;
}

void SessionRegistry::remove_all() {
  std::vector<std::string> ids;
  for (const auto& [id, e] : entries_) ids.push_back(id);
  for (const auto& id : ids) remove(id);
}

void SessionRegistry::kill_all() {
  for (auto& [id, e] : entries_)
    if (e->shell) e->shell->kill_all();
  for (auto& [shell, unused] : dying_) shell->kill_all();
}

void SessionRegistry::clear() {
  std::map<pty::BashSession*, bool> shells = std::move(dying_);
  for (auto& [id, e] : entries_)
    if (e->shell) shells[e->shell] = true;
  for (auto& [shell, unused] : shells) {
    shell->set_on_gone(nullptr);
    shell->destroy();
  }
  entries_.clear();
}

}  // namespace execd::sessions
