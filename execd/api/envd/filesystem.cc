// execd/api/envd/filesystem: see header.
//   POST /filesystem.Filesystem/Stat | MakeDir | Move | ListDir | Remove   unary
//   POST /filesystem.Filesystem/WatchDir                                  server stream
//   POST /filesystem.Filesystem/CreateWatcher | GetWatcherEvents | RemoveWatcher
#include "execd/api/envd/filesystem.h"

#include "execd/api/envd/connect_rpc.h"
#include "execd/api/envd/files.h"
#include "execd/context.h"
#include "execd/envd/entries.h"
#include "execd/envd/watch_stream.h"
#include "execd/runners/command_spawn.h"
#include "fs/entries.h"
#include "fs/file_info.h"
#include "fs/ops.h"

namespace execd::api {

using ::execd::envd::EnvdFilesystem;
namespace envd = protocol::envd;
namespace cn = protocol::connect;
using rpc::CallInfo;

// Named, not anonymous: the unity build puts this file in one translation
// unit with the other api/ files.
namespace envd_filesystem_impl {

using ::execd::envd::entry_info;
using ::execd::envd::fill_entries;
using ::execd::envd::watch_setup_error;
using ::execd::envd::WatchStream;

// What the handlers use: the watchers (execd/envd/filesystem) and the file
// jobs (api/file_jobs) every unary call runs on.
struct Calls {
  EnvdFilesystem& fs;
  FileService& files;
  const Context& ctx;
};

cn::Code code_for(fs::ErrorKind kind) {
  switch (kind) {
    case fs::ErrorKind::not_found:
      return cn::Code::not_found;
    case fs::ErrorKind::bad_request:
      return cn::Code::invalid_argument;
    case fs::ErrorKind::forbidden:
      return cn::Code::permission_denied;
    case fs::ErrorKind::no_space:
    case fs::ErrorKind::too_large:
      return cn::Code::resource_exhausted;
    case fs::ErrorKind::conflict:
      return cn::Code::failed_precondition;
    case fs::ErrorKind::internal:
      break;
  }
  return cn::Code::internal;
}

FileReply reply(std::string json) { return FileReply{200, "application/json", std::move(json), {}}; }
FileReply error_reply(cn::Code code, std::string message) {
  return FileReply{cn::http_status(code), "application/json", cn::error_json({code, std::move(message)}), {}};
}
FileReply error_reply(const fs::Error& e) { return error_reply(code_for(e.kind), e.message); }

// The call's user, looked up (pool thread): its home for paths, ids for
// what is created.
struct User {
  runners::UserIds ids;
  bool named = false;
  // Who new files belong to: the named user, else execd's own (nullopt).
  std::optional<uid_t> owner_uid() const { return named ? std::optional<uid_t>(ids.uid) : std::nullopt; }
  std::optional<gid_t> owner_gid() const { return named ? std::optional<gid_t>(ids.gid) : std::nullopt; }
};
std::optional<FileReply> lookup(const std::string& name, User& u) {
  if (!runners::lookup_user(name, u.ids))
    return error_reply(cn::Code::unauthenticated, "error looking up user '" + name + "': unknown user");
  u.named = !name.empty();
  return std::nullopt;
}

// The EntryInfo answer of Stat, MakeDir and Move: `path` as it is now.
FileReply entry_reply(const std::string& path) {
  auto e = fs::stat_entry(path);
  if (!e) return error_reply(e.error());
  fs::OwnerNames names;
  return reply(envd::entry_response(entry_info(e.value(), names)));
}

template <class T>
bool decoded(http::Exchange& ex, std::variant<T, protocol::DecodeError>& v) {
  if (auto* err = std::get_if<protocol::DecodeError>(&v)) {
    rpc::respond_error(ex, {cn::Code::invalid_argument, err->message});
    return false;
  }
  return true;
}

// --- unary calls ------------------------------------------------------------

void handle_stat(const Calls& svc, http::Exchange& ex, std::string_view m, const CallInfo& info) {
  auto d = envd::decode_path_request(m);
  if (!decoded(ex, d)) return;
  run_file_job(svc.files, ex, [path = std::get<envd::PathRequest>(d).path, user = info.user]() -> FileReply {
    User u;
    if (auto err = lookup(user, u)) return *err;
    return entry_reply(fs::resolve_user_path(path, u.ids.home));
  });
}

void handle_make_dir(const Calls& svc, http::Exchange& ex, std::string_view m, const CallInfo& info) {
  auto d = envd::decode_path_request(m);
  if (!decoded(ex, d)) return;
  run_file_job(svc.files, ex, [path = std::get<envd::PathRequest>(d).path, user = info.user]() -> FileReply {
    User u;
    if (auto err = lookup(user, u)) return *err;
    std::string dir = fs::resolve_user_path(path, u.ids.home);
    struct stat st {};
    if (stat(dir.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) return error_reply(cn::Code::already_exists, "directory already exists: " + dir);
      return error_reply(cn::Code::invalid_argument, "path already exists but it is not a directory: " + dir);
    }
    if (auto s = fs::make_dirs_owned(dir, u.owner_uid(), u.owner_gid()); !s) return error_reply(s.error());
    return entry_reply(dir);
  });
}

void handle_move(const Calls& svc, http::Exchange& ex, std::string_view m, const CallInfo& info) {
  auto d = envd::decode_move(m);
  if (!decoded(ex, d)) return;
  run_file_job(svc.files, ex, [req = std::get<envd::MoveRequest>(d), user = info.user]() -> FileReply {
    User u;
    if (auto err = lookup(user, u)) return *err;
    std::string from = fs::resolve_user_path(req.source, u.ids.home);
    std::string to = fs::resolve_user_path(req.destination, u.ids.home);
    if (auto s = fs::rename_replacing(from, to, u.owner_uid(), u.owner_gid()); !s) return error_reply(s.error());
    return entry_reply(to);
  });
}

void handle_list_dir(const Calls& svc, http::Exchange& ex, std::string_view m, const CallInfo& info) {
  auto d = envd::decode_list_dir(m);
  if (!decoded(ex, d)) return;
  auto max_entries = static_cast<size_t>(svc.ctx.config.envd_max_list_entries);
  run_file_job(svc.files, ex, [req = std::get<envd::ListDirRequest>(d), user = info.user, max_entries]() -> FileReply {
    User u;
    if (auto err = lookup(user, u)) return *err;
    std::string shown = fs::resolve_user_path(req.path, u.ids.home);
    char buf[PATH_MAX];
    if (!realpath(shown.c_str(), buf)) {
      if (errno == ENOENT || errno == ENOTDIR) return error_reply(cn::Code::not_found, "path not found: " + shown);
      if (errno == ELOOP) return error_reply(cn::Code::failed_precondition, "cyclic symlink at " + shown);
      return error_reply(fs::errno_error(errno, "resolve " + shown));
    }
    std::string real = buf;
    struct stat st {};
    if (stat(real.c_str(), &st) != 0) return error_reply(fs::errno_error(errno, "stat " + real));
    if (!S_ISDIR(st.st_mode)) return error_reply(cn::Code::invalid_argument, "path is not a directory: " + shown);
    int depth = req.depth == 0 ? 1 : static_cast<int>(std::min<uint32_t>(req.depth, 4096));
    auto entries = fs::walk_entries(shown, real, depth, max_entries);
    if (!entries) return error_reply(entries.error());
    fs::OwnerNames names;
    std::vector<envd::EntryInfo> out;
    out.reserve(entries.value().size());
    for (const auto& e : entries.value()) out.push_back(entry_info(e, names));
    return reply(envd::list_dir_response(out));
  });
}

void handle_remove(const Calls& svc, http::Exchange& ex, std::string_view m, const CallInfo& info) {
  auto d = envd::decode_path_request(m);
  if (!decoded(ex, d)) return;
  run_file_job(svc.files, ex, [path = std::get<envd::PathRequest>(d).path, user = info.user]() -> FileReply {
    User u;
    if (auto err = lookup(user, u)) return *err;
    std::string p = fs::resolve_user_path(path, u.ids.home);
    if (p == "/") return error_reply(cn::Code::invalid_argument, "refusing to remove /");
    // rm -rf: a missing path is fine, as with envd's os.RemoveAll.
    if (auto s = fs::remove_tree(p); !s) return error_reply(s.error());
    return reply("{}");
  });
}

// --- watchers ---------------------------------------------------------------

cn::Error too_many_watchers(const Calls& svc) {
  return {cn::Code::resource_exhausted, "too many watchers: " + std::to_string(svc.ctx.config.envd_max_watchers) +
                                            " are open (--envd-max-watchers)"};
}

// Resolving the watched path needs the user's home: a pool job, then `then`
// on the loop with the exchange (if the client is still there).
void resolve_then(const Calls& svc, http::Exchange& ex, const std::string& path, const std::string& user,
                  std::function<void(http::Exchange&, const std::string& dir, const std::string& error)> then) {
  auto resolved = std::make_shared<std::pair<std::string, std::string>>();
  run_blocking(
      svc.ctx.loop, ex,
      [resolved, path, user] {
        runners::UserIds ids;
        if (!runners::lookup_user(user, ids)) resolved->second = "error looking up user '" + user + "': unknown user";
        else resolved->first = fs::resolve_user_path(path, ids.home);
      },
      [resolved, then = std::move(then)](http::Exchange& ex) { then(ex, resolved->first, resolved->second); });
}

void handle_watch_dir(const Calls& svc, http::Exchange& ex, std::string_view m, const CallInfo& info) {
  auto d = envd::decode_watch(m);
  if (auto* err = std::get_if<protocol::DecodeError>(&d))
    return rpc::stream_error(ex, {cn::Code::invalid_argument, err->message});
  if (svc.fs.watchers() >= static_cast<size_t>(svc.ctx.config.envd_max_watchers))
    return rpc::stream_error(ex, too_many_watchers(svc));
  auto req = std::get<envd::WatchRequest>(d);
  resolve_then(svc, ex, req.path, info.user,
               [svc, req, info](http::Exchange& ex, const std::string& dir, const std::string& error) {
                 if (!error.empty()) return rpc::stream_error(ex, {cn::Code::unauthenticated, error});
                 if (svc.fs.watchers() >= static_cast<size_t>(svc.ctx.config.envd_max_watchers))
                   return rpc::stream_error(ex, too_many_watchers(svc));
                 auto stream = std::make_unique<WatchStream>(svc.fs, ex, info.timeout_ms, info.keepalive_ms,
                                                               req.include_entry);
                 WatchStream& s = *stream;
                 ex.attach(std::move(stream));
                 s.start(dir, req.recursive);
               });
}

void handle_create_watcher(const Calls& svc, http::Exchange& ex, std::string_view m, const CallInfo& info) {
  auto d = envd::decode_watch(m);
  if (!decoded(ex, d)) return;
  svc.fs.prune();
  if (svc.fs.watchers() >= static_cast<size_t>(svc.ctx.config.envd_max_watchers))
    return rpc::respond_error(ex, too_many_watchers(svc));
  auto req = std::get<envd::WatchRequest>(d);
  resolve_then(svc, ex, req.path, info.user,
               [svc, req](http::Exchange& ex, const std::string& dir, const std::string& error) {
                 if (!error.empty()) return rpc::respond_error(ex, {cn::Code::unauthenticated, error});
                 svc.fs.prune();
                 if (svc.fs.watchers() >= static_cast<size_t>(svc.ctx.config.envd_max_watchers))
                   return rpc::respond_error(ex, too_many_watchers(svc));
                 svc.fs.create_polling(ex, dir, req.recursive, req.include_entry);
               });
}

void handle_get_events(const Calls& svc, http::Exchange& ex, std::string_view m) {
  auto d = envd::decode_watcher_id(m);
  if (!decoded(ex, d)) return;
  const std::string& id = std::get<envd::WatcherIdRequest>(d).watcher_id;
  auto it = svc.fs.polling.find(id);
  if (it == svc.fs.polling.end() || it->second->dead)
    return rpc::respond_error(ex, {cn::Code::not_found, "watcher " + id + " not found"});
  EnvdFilesystem::PollingWatcher& w = *it->second;
  if (w.dropped) {
    // Said once; the events kept are returned by the next call.
    uint64_t n = w.dropped;
    w.dropped = 0;
    return rpc::respond_error(ex, {cn::Code::resource_exhausted,
                                   std::to_string(n) + " events were dropped: more than " +
                                       std::to_string(svc.ctx.config.envd_watcher_queue) +
                                       " waited to be read (--envd-watcher-queue)"});
  }
  if (w.events.empty() && !w.error.empty()) {
    std::string error = w.error;
    w.dead = true;
    return rpc::respond_error(ex, {cn::Code::failed_precondition, "the watch ended: " + error});
  }
  std::vector<envd::FsEvent> events(std::make_move_iterator(w.events.begin()), std::make_move_iterator(w.events.end()));
  w.events.clear();
  if (!w.include_entry) return rpc::respond(ex, envd::watcher_events_response(events));
  run_file_job(svc.files, ex, [dir = w.dir, events = std::move(events)]() mutable {
    fill_entries(dir, events);
    return reply(envd::watcher_events_response(events));
  });
}

void handle_remove_watcher(const Calls& svc, http::Exchange& ex, std::string_view m) {
  auto d = envd::decode_watcher_id(m);
  if (!decoded(ex, d)) return;
  const std::string& id = std::get<envd::WatcherIdRequest>(d).watcher_id;
  if (!svc.fs.remove_polling(id)) return rpc::respond_error(ex, {cn::Code::not_found, "watcher " + id + " not found"});
  rpc::respond(ex, "{}");
}

}  // namespace envd_filesystem_impl

void add_envd_filesystem_routes(RouteTable& routes, EnvdFilesystem& fs, FileService& files) {
  namespace impl = envd_filesystem_impl;
  const impl::Calls svc{fs, files, fs.ctx};
  const std::string base = "/filesystem.Filesystem/";
  using WithUser = void (*)(const impl::Calls&, http::Exchange&, std::string_view, const CallInfo&);
  using Plain = void (*)(const impl::Calls&, http::Exchange&, std::string_view);
  for (auto [name, h] : {std::pair<const char*, WithUser>{"Stat", impl::handle_stat}, {"MakeDir", impl::handle_make_dir},
                         {"Move", impl::handle_move}, {"ListDir", impl::handle_list_dir},
                         {"Remove", impl::handle_remove}, {"CreateWatcher", impl::handle_create_watcher}})
    rpc::add_unary(routes, base + name,
                   [svc, h](http::Exchange& ex, std::string_view m, const CallInfo& i) { h(svc, ex, m, i); });
  for (auto [name, h] : {std::pair<const char*, Plain>{"GetWatcherEvents", impl::handle_get_events},
                         {"RemoveWatcher", impl::handle_remove_watcher}})
    rpc::add_unary(routes, base + name,
                   [svc, h](http::Exchange& ex, std::string_view m, const CallInfo&) { h(svc, ex, m); });
  rpc::add_server_stream(routes, base + "WatchDir", [svc](http::Exchange& ex, std::string_view m, const CallInfo& i) {
    impl::handle_watch_dir(svc, ex, m, i);
  });
}

}  // namespace execd::api
