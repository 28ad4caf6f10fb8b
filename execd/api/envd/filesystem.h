// execd/api/envd/filesystem: E2B's filesystem.Filesystem service (envd's
// spec/filesystem/filesystem.proto) over Connect: Stat, MakeDir, Move,
// ListDir, Remove, the WatchDir stream and the polling watchers
// (CreateWatcher, GetWatcherEvents, RemoveWatcher).
//
// Paths resolve as envd resolves them: "~" and relative paths against the
// home of the call's user (Authorization: Basic; default: execd's own user);
// what MakeDir and Move create belongs to that user. The blocking work (user
// lookups, stat, walks) runs on the threadpool behind the file gate
// (fs/entries); watches come from execd/watch.
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

#include "execd/api/api.h"  // FileService, run_file_job (execd/files) as api:: names
#include "execd/context.h"
#include "execd/routes.h"
#include "execd/watch/dir_watcher.h"
#include "protocol/envd.h"

namespace execd::api {

struct ReadyWait;

class EnvdFilesystem {
 public:
  EnvdFilesystem(const Context& ctx, FileService& files) : ctx(ctx), files(files) {}
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
  // Daemon exit.
  void close();

  const Context& ctx;
  FileService& files;
  std::map<std::string, std::unique_ptr<PollingWatcher>> polling;
  size_t streams = 0;  // live WatchDir streams
};

void add_envd_filesystem_routes(RouteTable& routes, EnvdFilesystem& fs);

}  // namespace execd::api
