// execd/api/envd/filesystem: see header.
//   POST /filesystem.Filesystem/Stat | MakeDir | Move | ListDir | Remove   unary
//   POST /filesystem.Filesystem/WatchDir                                  server stream
//   POST /filesystem.Filesystem/CreateWatcher | GetWatcherEvents | RemoveWatcher
#include "execd/api/envd/filesystem.h"

#include <spdlog/spdlog.h>

#include "execd/http/awaiter.h"
#include "execd/api/envd/connect_rpc.h"
#include "execd/api/envd/files.h"
#include "execd/ids.h"
#include "execd/context.h"
#include "execd/http/connection.h"
#include "execd/runners/command_spawn.h"
#include "fs/entries.h"
#include "fs/file_info.h"
#include "fs/ops.h"
#include "fs/pool_job.h"
#include "fs/xattrs.h"

namespace execd::api {

namespace envd = protocol::envd;
namespace cn = protocol::connect;
using rpc::CallInfo;

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

// Named, not anonymous: the unity build puts this file in one translation
// unit with the other api/ files.
namespace envd_filesystem_impl {

constexpr uint64_t kDefaultKeepaliveMs = 90 * 1000;

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

envd::EntryInfo entry_info(const fs::Entry& e, fs::OwnerNames& names) {
  envd::EntryInfo out;
  out.name = e.name;
  out.path = e.path;
  const struct stat& kind = e.is_symlink && e.target_ok ? e.target : e.st;
  // A symlink reports its target's type and says it is a link (envd >= 0.6.x).
  if (S_ISREG(kind.st_mode)) out.type = envd::FileType::file;
  else if (S_ISDIR(kind.st_mode)) out.type = envd::FileType::directory;
  else if (S_ISLNK(kind.st_mode)) out.type = envd::FileType::symlink;
  out.is_symlink = e.is_symlink;
  if (e.is_symlink) out.symlink_target = e.resolved;
  out.size = static_cast<int64_t>(e.st.st_size);
  out.mode = static_cast<uint32_t>(kind.st_mode & 0777);
  out.permissions = envd::go_file_mode_string(e.st.st_mode);
  out.owner = names.user(e.st.st_uid);
  out.group = names.group(e.st.st_gid);
  out.modified = e.st.st_mtim;
  out.metadata = fs::read_xattrs(e.path, kE2BMetadataPrefix);  // envd reports user.e2b.* however set
  return out;
}

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

void handle_stat(EnvdFilesystem& svc, http::Exchange& ex, std::string_view m, const CallInfo& info) {
  auto d = envd::decode_path_request(m);
  if (!decoded(ex, d)) return;
  run_file_job(svc.files, ex, [path = std::get<envd::PathRequest>(d).path, user = info.user]() -> FileReply {
    User u;
    if (auto err = lookup(user, u)) return *err;
    return entry_reply(fs::resolve_user_path(path, u.ids.home));
  });
}

void handle_make_dir(EnvdFilesystem& svc, http::Exchange& ex, std::string_view m, const CallInfo& info) {
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

void handle_move(EnvdFilesystem& svc, http::Exchange& ex, std::string_view m, const CallInfo& info) {
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

void handle_list_dir(EnvdFilesystem& svc, http::Exchange& ex, std::string_view m, const CallInfo& info) {
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

void handle_remove(EnvdFilesystem& svc, http::Exchange& ex, std::string_view m, const CallInfo& info) {
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

envd::EventType event_type(watch::Change c) {
  switch (c) {
    case watch::Change::create:
      return envd::EventType::create;
    case watch::Change::write:
      return envd::EventType::write;
    case watch::Change::remove:
      return envd::EventType::remove;
    case watch::Change::rename:
      return envd::EventType::rename;
    case watch::Change::chmod:
      return envd::EventType::chmod;
  }
  return envd::EventType::unspecified;
}

// Pool thread: the entry of every event that leaves one behind (envd's
// opCarriesEntry), as it is now; none for what is gone already.
void fill_entries(const std::string& dir, std::vector<envd::FsEvent>& events) {
  fs::OwnerNames names;
  for (auto& ev : events) {
    if (ev.type != envd::EventType::create && ev.type != envd::EventType::write &&
        ev.type != envd::EventType::chmod)
      continue;
    auto e = fs::stat_entry(dir + "/" + ev.name);
    if (e) ev.entry = entry_info(e.value(), names);
  }
}

cn::Error too_many_watchers(const EnvdFilesystem& svc) {
  return {cn::Code::resource_exhausted, "too many watchers: " + std::to_string(svc.ctx.config.envd_max_watchers) +
                                            " are open (--envd-max-watchers)"};
}

// Resolving the watched path needs the user's home: a pool job, then `then`
// on the loop with the exchange (if the client is still there).
void resolve_then(EnvdFilesystem& svc, http::Exchange& ex, const std::string& path, const std::string& user,
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

cn::Error watch_setup_error(const std::string& message) {
  if (message.rfind("directory not found", 0) == 0) return {cn::Code::not_found, message};
  if (message.rfind("path is not a directory", 0) == 0) return {cn::Code::invalid_argument, message};
  if (message.find("limit") != std::string::npos || message.find("too many") != std::string::npos)
    return {cn::Code::resource_exhausted, message};
  return {cn::Code::internal, message};
}

// WatchDir: a stream of the watcher's events, keepalives between them.
class WatchStream;

// Stats a batch of a stream's events on the pool (include_entry).
struct EntryJob {
  Link<WatchStream> stream;
  std::string dir;
  std::vector<envd::FsEvent> events;
};

class WatchStream final : public http::Source {
 public:
  WatchStream(EnvdFilesystem& svc, http::Exchange& ex, const CallInfo& info, bool include_entry)
      : svc_(svc),
        ex_(ex),
        keepalive_ms_(info.keepalive_ms ? info.keepalive_ms : kDefaultKeepaliveMs),
        include_entry_(include_entry) {
    ++svc_.streams;
    uint64_t now = ex.connection().host().now_ms();
    last_sent_ = now;
    if (info.timeout_ms) deadline_ = now + info.timeout_ms;
  }
  ~WatchStream() override { --svc_.streams; }

  void start(const std::string& dir, bool recursive) {
    dir_ = dir;
    watcher_ = watch::DirWatcher::start(
        svc_.ctx.loop, dir, recursive, [this](const watch::Event& e) { event(e); },
        [this](const std::string& error) { ready(error); },
        [this](const std::string& error) {
          cn::Error e{error.find("lost") != std::string::npos ? cn::Code::data_loss : cn::Code::not_found, error};
          end(&e);
        });
  }

  void proceed() override { flush(); }
  void stop() override {
    ended_ = true;
    watcher_.reset();
  }
  void tick(uint64_t now_ms) override {
    if (ended_ || !live_) return;
    if (deadline_ && now_ms >= deadline_) {
      cn::Error e{cn::Code::deadline_exceeded, "the watch reached its deadline (Connect-Timeout-Ms)"};
      return end(&e);
    }
    if (now_ms - last_sent_ >= keepalive_ms_ && queue_.empty()) {
      last_sent_ = now_ms;
      std::string out = ex_.take_buffer();
      rpc::append_message(out, envd::append_watch_keepalive);
      send(std::move(out));
    }
  }

 private:
  void ready(const std::string& error) {
    if (ended_) return;
    if (!error.empty()) {
      ended_ = true;
      return rpc::stream_error(ex_, watch_setup_error(error));
    }
    live_ = true;
    rpc::begin_stream(ex_);
    std::string out = ex_.take_buffer();
    rpc::append_message(out, envd::append_watch_start);
    send(std::move(out));
  }

  void event(const watch::Event& e) {
    if (ended_) return;
    size_t waiting = queue_.size() + unstatted_.size() + (job_ ? kEntryBatch : 0);
    if (waiting >= static_cast<size_t>(svc_.ctx.config.envd_watcher_queue)) {
      cn::Error err{cn::Code::resource_exhausted, "the client did not read " + std::to_string(waiting) +
                                                      " events (--envd-watcher-queue); the watch ends"};
      return end(&err);
    }
    envd::FsEvent ev{e.name, event_type(e.change), std::nullopt};
    if (include_entry_) {
      unstatted_.push_back(std::move(ev));
      return stat_next();
    }
    queue_.push_back(std::move(ev));
    if (!blocked_) flush();
  }

  void entries_done(std::vector<envd::FsEvent> events) {
    for (auto& ev : events) queue_.push_back(std::move(ev));
    if (!blocked_) flush();
    stat_next();
  }

  void flush() {
    blocked_ = false;
    while (!queue_.empty() && !ended_) {
      std::string out = ex_.take_buffer();
      // A batch per write, not one write per event.
      for (int i = 0; i < 256 && !queue_.empty(); ++i) {
        rpc::append_message(out, [&](std::string& o) { envd::append_watch_event(o, queue_.front()); });
        queue_.pop_front();
      }
      if (!send(std::move(out))) return;
    }
  }

  // One pool job at a time, so events keep their order.
  void stat_next() {
    if (job_ || unstatted_.empty() || ended_) return;
    auto job = std::make_unique<EntryJob>();
    job->dir = dir_;
    while (!unstatted_.empty() && job->events.size() < kEntryBatch) {
      job->events.push_back(std::move(unstatted_.front()));
      unstatted_.pop_front();
    }
    link(*job, job->stream, *this, job_);
    fs::queue_job<EntryJob>(
        svc_.ctx.loop, std::move(job), [](EntryJob& j) { fill_entries(j.dir, j.events); },
        [](EntryJob& j, int) {
          if (WatchStream* s = j.stream.get()) {
            j.stream.cut();
            s->entries_done(std::move(j.events));
          }
        });
  }

  bool send(std::string&& out) {
    last_sent_ = ex_.connection().host().now_ms();
    if (ex_.send(std::move(out))) return true;
    blocked_ = true;
    return false;
  }

  void end(const cn::Error* e) {
    if (ended_) return;
    ended_ = true;
    if (!live_) return rpc::stream_error(ex_, *e);
    std::string out = ex_.take_buffer();
    cn::append_end_stream(out, e);
    ex_.end(std::move(out));
  }

  static constexpr size_t kEntryBatch = 256;

  EnvdFilesystem& svc_;
  http::Exchange& ex_;
  std::unique_ptr<watch::DirWatcher> watcher_;
  std::string dir_;
  std::deque<envd::FsEvent> queue_;      // ready to send
  std::deque<envd::FsEvent> unstatted_;  // include_entry: waiting for their entries
  Link<EntryJob> job_;
  uint64_t keepalive_ms_, last_sent_ = 0, deadline_ = 0;
  bool include_entry_;
  bool live_ = false, ended_ = false, blocked_ = false;
};

void handle_watch_dir(EnvdFilesystem& svc, http::Exchange& ex, std::string_view m, const CallInfo& info) {
  auto d = envd::decode_watch(m);
  if (auto* err = std::get_if<protocol::DecodeError>(&d))
    return rpc::stream_error(ex, {cn::Code::invalid_argument, err->message});
  if (svc.watchers() >= static_cast<size_t>(svc.ctx.config.envd_max_watchers))
    return rpc::stream_error(ex, too_many_watchers(svc));
  auto req = std::get<envd::WatchRequest>(d);
  resolve_then(svc, ex, req.path, info.user,
               [&svc, req, info](http::Exchange& ex, const std::string& dir, const std::string& error) {
                 if (!error.empty()) return rpc::stream_error(ex, {cn::Code::unauthenticated, error});
                 if (svc.watchers() >= static_cast<size_t>(svc.ctx.config.envd_max_watchers))
                   return rpc::stream_error(ex, too_many_watchers(svc));
                 auto stream = std::make_unique<WatchStream>(svc, ex, info, req.include_entry);
                 WatchStream& s = *stream;
                 ex.attach(std::move(stream));
                 s.start(dir, req.recursive);
               });
}

void handle_create_watcher(EnvdFilesystem& svc, http::Exchange& ex, std::string_view m, const CallInfo& info) {
  auto d = envd::decode_watch(m);
  if (!decoded(ex, d)) return;
  svc.prune();
  if (svc.watchers() >= static_cast<size_t>(svc.ctx.config.envd_max_watchers))
    return rpc::respond_error(ex, too_many_watchers(svc));
  auto req = std::get<envd::WatchRequest>(d);
  resolve_then(svc, ex, req.path, info.user,
               [&svc, req](http::Exchange& ex, const std::string& dir, const std::string& error) {
                 if (!error.empty()) return rpc::respond_error(ex, {cn::Code::unauthenticated, error});
                 svc.prune();
                 if (svc.watchers() >= static_cast<size_t>(svc.ctx.config.envd_max_watchers))
                   return rpc::respond_error(ex, too_many_watchers(svc));
                 auto w = std::make_unique<EnvdFilesystem::PollingWatcher>();
                 EnvdFilesystem::PollingWatcher* pw = w.get();
                 pw->id = random_uuid();
                 pw->dir = dir;
                 pw->include_entry = req.include_entry;
                 auto* wait = new ReadyWait;
                 wait->watcher = pw;
                 pw->waiting = wait;
                 http::await(ex, *wait);
                 svc.polling[pw->id] = std::move(w);
                 const size_t cap = static_cast<size_t>(svc.ctx.config.envd_watcher_queue);
                 pw->watcher = watch::DirWatcher::start(
                     svc.ctx.loop, dir, req.recursive,
                     [pw, cap](const watch::Event& e) {
                       if (pw->events.size() >= cap) {
                         ++pw->dropped;
                         return;
                       }
                       pw->events.push_back(envd::FsEvent{e.name, event_type(e.change), std::nullopt});
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
                       rpc::respond(*ex, envd::create_watcher_response(pw->id));
                     },
                     [pw](const std::string& error) { pw->error = error; });
               });
}

void handle_get_events(EnvdFilesystem& svc, http::Exchange& ex, std::string_view m) {
  auto d = envd::decode_watcher_id(m);
  if (!decoded(ex, d)) return;
  const std::string& id = std::get<envd::WatcherIdRequest>(d).watcher_id;
  auto it = svc.polling.find(id);
  if (it == svc.polling.end() || it->second->dead)
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

void handle_remove_watcher(EnvdFilesystem& svc, http::Exchange& ex, std::string_view m) {
  auto d = envd::decode_watcher_id(m);
  if (!decoded(ex, d)) return;
  const std::string& id = std::get<envd::WatcherIdRequest>(d).watcher_id;
  auto it = svc.polling.find(id);
  if (it == svc.polling.end() || it->second->dead)
    return rpc::respond_error(ex, {cn::Code::not_found, "watcher " + id + " not found"});
  if (ReadyWait* w = it->second->waiting) w->watcher = nullptr;
  svc.polling.erase(it);  // not inside any of its callbacks: safe to free here
  rpc::respond(ex, "{}");
}

}  // namespace envd_filesystem_impl

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

void add_envd_filesystem_routes(RouteTable& routes, EnvdFilesystem& svc) {
  namespace impl = envd_filesystem_impl;
  const std::string base = "/filesystem.Filesystem/";
  using WithUser = void (*)(EnvdFilesystem&, http::Exchange&, std::string_view, const CallInfo&);
  using Plain = void (*)(EnvdFilesystem&, http::Exchange&, std::string_view);
  for (auto [name, h] : {std::pair<const char*, WithUser>{"Stat", impl::handle_stat}, {"MakeDir", impl::handle_make_dir},
                         {"Move", impl::handle_move}, {"ListDir", impl::handle_list_dir},
                         {"Remove", impl::handle_remove}, {"CreateWatcher", impl::handle_create_watcher}})
    rpc::add_unary(routes, base + name,
                   [&svc, h](http::Exchange& ex, std::string_view m, const CallInfo& i) { h(svc, ex, m, i); });
  for (auto [name, h] : {std::pair<const char*, Plain>{"GetWatcherEvents", impl::handle_get_events},
                         {"RemoveWatcher", impl::handle_remove_watcher}})
    rpc::add_unary(routes, base + name,
                   [&svc, h](http::Exchange& ex, std::string_view m, const CallInfo&) { h(svc, ex, m); });
  rpc::add_server_stream(routes, base + "WatchDir", [&svc](http::Exchange& ex, std::string_view m, const CallInfo& i) {
    impl::handle_watch_dir(svc, ex, m, i);
  });
}

}  // namespace execd::api
