// execd/api/envd/filesystem: E2B's filesystem.Filesystem service (envd's
// spec/filesystem/filesystem.proto) over Connect: Stat, MakeDir, Move,
// ListDir, Remove, the WatchDir stream and the polling watchers
// (CreateWatcher, GetWatcherEvents, RemoveWatcher).
//
// Paths resolve as envd resolves them: "~" and relative paths against the
// home of the call's user (Authorization: Basic; default: execd's own user);
// what MakeDir and Move create belongs to that user. The blocking work (user
// lookups, stat, walks) runs on the threadpool behind the file gate
// (fs/entries); the watchers are execd/envd's (envd/filesystem,
// envd/watch_stream), their events from execd/watch.
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

#include "execd/api/api.h"  // FileService, run_file_job (execd/files) as api:: names
#include "execd/envd/filesystem.h"
#include "execd/routes.h"

namespace execd::api {

// `files`: the file jobs (api/file_jobs) the unary calls run on.
void add_envd_filesystem_routes(RouteTable& routes, ::execd::envd::EnvdFilesystem& fs, FileService& files);

}  // namespace execd::api
