// execd/envd/watch_stream: the answer of a WatchDir call (api/envd/filesystem):
// a Connect server stream of one directory watch's events (execd/watch),
// keepalives between them. A client that does not read holds up to
// --envd-watcher-queue events before the stream ends with
// resource_exhausted; with include_entry, the entries of a batch of events
// are statted on the pool, one job at a time so events keep their order.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "execd/envd/filesystem.h"
#include "execd/http/exchange.h"
#include "execd/link.h"
#include "execd/watch/dir_watcher.h"
#include "protocol/connect.h"
#include "protocol/envd.h"

namespace execd::envd {

class WatchStream;

// Stats a batch of a stream's events on the pool (include_entry).
struct EntryJob {
  Link<WatchStream> stream;
  std::string dir;
  std::vector<protocol::envd::FsEvent> events;
};

class WatchStream final : public http::Source {
 public:
  // timeout_ms: the call's deadline (Connect-Timeout-Ms; 0: none);
  // keepalive_ms: its Keepalive-Ping-Interval (0: envd's default).
  WatchStream(EnvdFilesystem& svc, http::Exchange& ex, uint64_t timeout_ms, uint64_t keepalive_ms,
              bool include_entry);
  ~WatchStream() override;

  void start(const std::string& dir, bool recursive);

  void proceed() override;
  void stop() override;
  void tick(uint64_t now_ms) override;

 private:
  void ready(const std::string& error);
  void event(const watch::Event& e);
  void entries_done(std::vector<protocol::envd::FsEvent> events);
  void flush();
  // One pool job at a time, so events keep their order.
  void stat_next();
  bool send(std::string&& out);
  void end(const protocol::connect::Error* e);

  static constexpr size_t kEntryBatch = 256;

  EnvdFilesystem& svc_;
  http::Exchange& ex_;
  std::unique_ptr<watch::DirWatcher> watcher_;
  std::string dir_;
  std::deque<protocol::envd::FsEvent> queue_;      // ready to send
  std::deque<protocol::envd::FsEvent> unstatted_;  // include_entry: waiting for their entries
  Link<EntryJob> job_;
  uint64_t keepalive_ms_, last_sent_ = 0, deadline_ = 0;
  bool include_entry_;
  bool live_ = false, ended_ = false, blocked_ = false;
};

}  // namespace execd::envd
