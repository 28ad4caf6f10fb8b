// execd/envd/filesystem: see header.
#include "execd/envd/filesystem.h"

#include "execd/envd/entries.h"
#include "execd/http/connect_answers.h"
#include "execd/ids.h"

namespace execd::envd {

namespace wire = protocol::envd;
namespace cn = protocol::connect;
namespace rpc = http::rpc;

cn::Error watch_setup_error(const std::string& message) {
  if (message.rfind("directory not found", 0) == 0) return {cn::Code::not_found, message};
  if (message.rfind("path is not a directory", 0) == 0) return {cn::Code::invalid_argument, message};
  if (message.find("limit") != std::string::npos || message.find("too many") != std::string::npos)
    return {cn::Code::resource_exhausted, message};
  return {cn::Code::internal, message};
}

void EnvdFilesystem::create_polling(http::Exchange& ex, const std::string& dir, bool recursive, bool include_entry) {
  auto w = std::make_unique<EnvdFilesystem::PollingWatcher>();
  EnvdFilesystem::PollingWatcher* pw = w.get();
  pw->id = random_uuid();
  pw->dir = dir;
  pw->include_entry = include_entry;
  auto* wait = new ReadyWait;
  wait->watcher = pw;
  pw->waiting = wait;
  http::await(ex, *wait);
  polling[pw->id] = std::move(w);
  const size_t cap = static_cast<size_t>(ctx.config.envd_watcher_queue);
  pw->watcher = watch::DirWatcher::start(
      ctx.loop, dir, recursive,
      [pw, cap](const watch::Event& e) {
        if (pw->events.size() >= cap) {
          ++pw->dropped;
          return;
        }
        pw->events.push_back(wire::FsEvent{e.name, event_type(e.change), std::nullopt});
      },
      [pw](const std::string& error) {
        ReadyWait* w = pw->waiting;
        pw->waiting = nullptr;
        http::Exchange* ex = w ? w->exchange() : nullptr;
        if (!error.empty()) pw->dead = true;
        if (w) {
          w->watcher = nullptr;
          w->awaiter.cut();
          delete w;
        }
        if (!ex) return;  // nobody to tell; dead already if it failed
        if (!error.empty()) return rpc::respond_error(*ex, watch_setup_error(error));
        rpc::respond(*ex, wire::create_watcher_response(pw->id));
      },
      [pw](const std::string& error) { pw->error = error; });
}

bool EnvdFilesystem::remove_polling(const std::string& id) {
  auto it = polling.find(id);
  if (it == polling.end() || it->second->dead) return false;
  if (ReadyWait* w = it->second->waiting) w->watcher = nullptr;
  polling.erase(it);  // not inside any of its callbacks: safe to free here
  return true;
}

EnvdFilesystem::~EnvdFilesystem() { close(); }

void EnvdFilesystem::prune() {
  for (auto it = polling.begin(); it != polling.end();) {
    if (it->second->dead && !it->second->waiting) it = polling.erase(it);
    else ++it;
  }
}

void EnvdFilesystem::close() {
  for (auto& [id, w] : polling)
    if (w->waiting) w->waiting->watcher = nullptr;
  polling.clear();
}

}  // namespace execd::envd
