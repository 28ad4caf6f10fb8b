// execd/envd/filesystem: the watchers of E2B's filesystem.Filesystem
// service (envd's spec/filesystem/filesystem.proto; its Connect handlers are
// api/envd/filesystem): the polling watchers (CreateWatcher,
// GetWatcherEvents, RemoveWatcher) and the count of WatchDir streams
// (envd/watch_stream), which share one limit.
//
// Limits: --envd-max-watchers watchers at once, streams and polling ones
// together (resource_exhausted before anything is set up); a polling
// watcher keeps at most --envd-watcher-queue events between reads (beyond
// that, the next GetWatcherEvents says how many were dropped), and a WatchDir
// stream whose client does not read holds as many before it ends with
// resource_exhausted.
//
// include_entry: events that leave something behind (create, write, chmod)
// carry the entry as it is when the event is read (a pool job stats them in
// batches); for an entry gone by then, none, as envd does.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>

#include "execd/context.h"
#include "execd/http/awaiter.h"
#include "execd/http/exchange.h"
#include "execd/watch/dir_watcher.h"
#include "protocol/connect.h"
#include "protocol/envd.h"

namespace execd::envd {

struct ReadyWait;

class EnvdFilesystem {
 public:
  explicit EnvdFilesystem(const Context& ctx) : ctx(ctx) {}
  ~EnvdFilesystem();

  struct PollingWatcher {
    std::string id;
    std::unique_ptr<watch::DirWatcher> watcher;
    std::deque<protocol::envd::FsEvent> events;
    uint64_t dropped = 0;   // events beyond --envd-watcher-queue since the last read
    std::string error;      // the watch ended (its directory went, the kernel dropped events)
    std::string dir;        // the watched directory, resolved
    bool include_entry = false;
    bool dead = false;      // to be let go of (outside the watcher's callbacks)
    ReadyWait* waiting = nullptr;  // the CreateWatcher call waiting for it to be live
  };

  size_t watchers() const { return polling.size() + streams; }
  // Lets go of polling watchers marked dead.
  void prune();
  // Starts a polling watcher on `dir` (resolved) for the CreateWatcher call
  // `ex`, answered with the watcher's id once the watch is live, or with why
  // it could not be set up.
  void create_polling(http::Exchange& ex, const std::string& dir, bool recursive, bool include_entry);
  // RemoveWatcher: false if there is no such watcher (or it is let go of).
  bool remove_polling(const std::string& id);
  // Daemon exit.
  void close();

  const Context& ctx;
  std::map<std::string, std::unique_ptr<PollingWatcher>> polling;
  size_t streams = 0;  // live WatchDir streams
};

// A CreateWatcher call waiting for its watch to be live.
struct ReadyWait : http::Awaitable {
  EnvdFilesystem::PollingWatcher* watcher = nullptr;
  void client_gone() override {
    // Nobody will learn the watcher's id: let it go.
    if (watcher) {
      watcher->dead = true;
      watcher->waiting = nullptr;
    }
    delete this;
  }
};

// The Connect error of a watch that could not be set up.
protocol::connect::Error watch_setup_error(const std::string& message);

}  // namespace execd::envd
