// execd/envd/watch_stream: see header.
#include "execd/envd/watch_stream.h"

#include "execd/envd/entries.h"
#include "execd/http/connect_answers.h"
#include "execd/http/connection.h"
#include "fs/pool_job.h"

namespace execd::envd {

namespace wire = protocol::envd;
namespace cn = protocol::connect;
namespace rpc = http::rpc;

constexpr uint64_t kDefaultKeepaliveMs = 90 * 1000;

WatchStream::WatchStream(EnvdFilesystem& svc, http::Exchange& ex, uint64_t timeout_ms, uint64_t keepalive_ms,
                         bool include_entry)
    : svc_(svc),
      ex_(ex),
      keepalive_ms_(keepalive_ms ? keepalive_ms : kDefaultKeepaliveMs),
      include_entry_(include_entry) {
  ++svc_.streams;
  uint64_t now = ex.connection().host().now_ms();
  last_sent_ = now;
  if (timeout_ms) deadline_ = now + timeout_ms;
}

WatchStream::~WatchStream() { --svc_.streams; }

void WatchStream::start(const std::string& dir, bool recursive) {
  dir_ = dir;
  watcher_ = watch::DirWatcher::start(
      svc_.ctx.loop, dir, recursive, [this](const watch::Event& e) { event(e); },
      [this](const std::string& error) { ready(error); },
      [this](const std::string& error) {
        cn::Error e{error.find("lost") != std::string::npos ? cn::Code::data_loss : cn::Code::not_found, error};
        end(&e);
      });
}

void WatchStream::proceed() { flush(); }

void WatchStream::stop() {
  ended_ = true;
  watcher_.reset();
}

void WatchStream::tick(uint64_t now_ms) {
  if (ended_ || !live_) return;
  if (deadline_ && now_ms >= deadline_) {
    cn::Error e{cn::Code::deadline_exceeded, "the watch reached its deadline (Connect-Timeout-Ms)"};
    return end(&e);
  }
  if (now_ms - last_sent_ >= keepalive_ms_ && queue_.empty()) {
    last_sent_ = now_ms;
    std::string out = ex_.take_buffer();
    rpc::append_message(out, wire::append_watch_keepalive);
    send(std::move(out));
  }
}

void WatchStream::ready(const std::string& error) {
  if (ended_) return;
  if (!error.empty()) {
    ended_ = true;
    return rpc::stream_error(ex_, watch_setup_error(error));
  }
  live_ = true;
  rpc::begin_stream(ex_);
  std::string out = ex_.take_buffer();
  rpc::append_message(out, wire::append_watch_start);
  send(std::move(out));
}

void WatchStream::event(const watch::Event& e) {
  if (ended_) return;
  size_t waiting = queue_.size() + unstatted_.size() + (job_ ? kEntryBatch : 0);
  if (waiting >= static_cast<size_t>(svc_.ctx.config.envd_watcher_queue)) {
    cn::Error err{cn::Code::resource_exhausted, "the client did not read " + std::to_string(waiting) +
                                                    " events (--envd-watcher-queue); the watch ends"};
    return end(&err);
  }
  wire::FsEvent ev{e.name, event_type(e.change), std::nullopt};
  if (include_entry_) {
    unstatted_.push_back(std::move(ev));
    return stat_next();
  }
  queue_.push_back(std::move(ev));
  if (!blocked_) flush();
}

void WatchStream::entries_done(std::vector<wire::FsEvent> events) {
  for (auto& ev : events) queue_.push_back(std::move(ev));
  if (!blocked_) flush();
  stat_next();
}

void WatchStream::flush() {
  blocked_ = false;
  while (!queue_.empty() && !ended_) {
    std::string out = ex_.take_buffer();
    // A batch per write, not one write per event.
    for (int i = 0; i < 256 && !queue_.empty(); ++i) {
      rpc::append_message(out, [&](std::string& o) { wire::append_watch_event(o, queue_.front()); });
      queue_.pop_front();
    }
    if (!send(std::move(out))) return;
  }
}

void WatchStream::stat_next() {
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

bool WatchStream::send(std::string&& out) {
  last_sent_ = ex_.connection().host().now_ms();
  if (ex_.send(std::move(out))) return true;
  blocked_ = true;
  return false;
}

void WatchStream::end(const cn::Error* e) {
  if (ended_) return;
  ended_ = true;
  if (!live_) return rpc::stream_error(ex_, *e);
  std::string out = ex_.take_buffer();
  cn::append_end_stream(out, e);
  ex_.end(std::move(out));
}

}  // namespace execd::envd
