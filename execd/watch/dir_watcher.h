// execd/watch/dir_watcher: changes under one directory, from inotify, for
// E2B's WatchDir and polling watchers (envd/filesystem, envd/watch_stream). Small on
// purpose: a stand-in until execd has a file-change feed of its own.
//
//  * One inotify instance per watcher, read on the loop through a uv_poll_t.
//    Setting it up (inotify_init, a watch on every directory of the tree
//    when recursive) blocks, so start() does it on the threadpool and
//    reports once the watch is live; `ready` then says whether it could.
//  * Events are fsnotify's kinds, as envd reports them: IN_CREATE and
//    IN_MOVED_TO are create, IN_MODIFY write, IN_DELETE remove,
//    IN_MOVED_FROM rename, IN_ATTRIB chmod; the name is relative to the
//    watched directory ("sub/file.txt").
//  * Recursive: a directory created (or moved in) later gets its watch when
//    its event comes, and what was made inside it before that is reported
//    as created. The watched directory itself going away, or the kernel's
//    queue overflowing, is reported through `on_error` and ends the watch.
//
// Ownership: the caller owns the DirWatcher; close() (or the destructor)
// stops the callbacks at once and frees the handle when libuv is done.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

namespace execd::watch {

enum class Change : uint8_t { create, write, remove, rename, chmod };

struct Event {
  std::string name;  // relative to the watched directory
  Change change;
};

class DirWatcher {
 public:
  using OnEvent = std::function<void(const Event&)>;
  using OnReady = std::function<void(const std::string& error)>;  // empty: watching
  using OnError = std::function<void(const std::string& error)>;

  // Starts watching `dir` (absolute). `on_ready` runs once on the loop.
  static std::unique_ptr<DirWatcher> start(uv_loop_t* loop, std::string dir, bool recursive, OnEvent on_event,
                                           OnReady on_ready, OnError on_error);
  ~DirWatcher();
  DirWatcher(const DirWatcher&) = delete;
  DirWatcher& operator=(const DirWatcher&) = delete;

  const std::string& dir() const { return dir_; }

 private:
  struct Setup;
  struct Handle;
  DirWatcher(uv_loop_t* loop, std::string dir, bool recursive) : loop_(loop), dir_(std::move(dir)), recursive_(recursive) {}
  void setup_done(Setup& s);
  void readable();
  void handle(int wd, uint32_t mask, const char* name);
  // Watches `rel` (a new directory) and what it already holds; reports its
  // entries as created.
  void add_tree(const std::string& rel);
  void fail(const std::string& error);

  uv_loop_t* loop_;
  std::string dir_;
  bool recursive_;
  OnEvent on_event_;
  OnReady on_ready_;
  OnError on_error_;
  int fd_ = -1;
  Handle* handle_ = nullptr;  // the uv_poll_t, freed in its close callback
  Setup* setup_ = nullptr;    // the pool job in flight, if any (it outlives us if need be)
  std::unordered_map<int, std::string> paths_;  // watch descriptor -> path relative to dir_ ("" = dir_)
  bool failed_ = false;
};

}  // namespace execd::watch
