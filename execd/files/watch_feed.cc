// execd/files/watch_feed: see header.
#include "execd/files/watch_feed.h"

#include <memory>
#include <string>

#include "execd/clock.h"
#include "protocol/watch.h"

namespace execd::files {

using http::Exchange;

namespace {

constexpr size_t kSendBytes = 256 * 1024;
constexpr uint64_t kPingMs = 15000;

class WatchFeed final : public http::Source, public watch::Follower {
 public:
  WatchFeed(Exchange& ex, watch::Hub& hub, watch::Watch& w) : ex_(ex), hub_(hub), watch_(&w) {}
  ~WatchFeed() override { let_go(); }

  void start(std::optional<uint64_t> since) {
    ex_.begin_chunked(200, {"Content-Type: application/x-ndjson", "Cache-Control: no-cache", "X-Accel-Buffering: no"});
    std::string out;
    int64_t now = unix_ms();
    bool known = since && *since <= hub_.current_seq();
    // Live events only; or, for a seq this execd never gave out (a client
    // of an execd before a restart whose clock went back), from now on.
    after_ = known ? *since : watch_->last_seq();
    // The first line's seq is where this feed continues, not the newest: a
    // resumed feed replays the backlog after `since` next, and a client that
    // kept the newest as the highest seq it saw would skip that backlog when
    // it reconnects before reading all of it.
    protocol::encode_watch_hello(out, watch_->root(), watch_->recursive(), after_, watch_->last_seq(), now);
    if (since && !known) protocol::encode_watch_gap(out, *since, after_, "unknown seq", now);
    if (known) gap_check(out, now, *since == 0);
    watch_->follow(this);
    last_sent_ms_ = uv_now(hub_.loop());
    if (!ex_.send(std::move(out))) {
      waiting_ = true;
      return;
    }
    pump();
  }

  void on_events() override {
    if (!waiting_) pump();
  }
  void proceed() override {
    waiting_ = false;
    pump();
  }
  void stop() override { let_go(); }
  void tick(uint64_t now_ms) override {
    if (!watch_ || waiting_ || now_ms - last_sent_ms_ < kPingMs) return;
    last_sent_ms_ = now_ms;
    std::string out;
    // What this feed has sent up to (the newest, once it is caught up),
    // never a seq ahead of the events the client has.
    protocol::encode_watch_ping(out, after_, unix_ms());
    if (!ex_.send(std::move(out))) waiting_ = true;
  }

 private:
  // Events after `after_` that are no longer (or were never) here: one gap.
  void gap_check(std::string& out, int64_t now, bool from_start) {
    uint64_t floor = watch_->floor();
    if (after_ >= floor) return;
    bool evicted = floor > watch_->start_seq();
    if (evicted || !from_start)
      protocol::encode_watch_gap(out, after_, floor, evicted ? "not retained" : "not watched then", now);
    after_ = floor;
  }

  void pump() {
    while (watch_ && !waiting_) {
      std::string out = ex_.take_buffer();
      out.clear();
      gap_check(out, unix_ms(), false);
      after_ = watch_->read(after_, kSendBytes, out);
      if (out.empty()) break;
      last_sent_ms_ = uv_now(hub_.loop());
      if (!ex_.send(std::move(out))) {
        waiting_ = true;
        return;
      }
    }
    if (watch_ && watch_->gone() && after_ >= watch_->last_seq()) {
      let_go();
      ex_.end();
    }
  }

  void let_go() {
    if (!watch_) return;
    watch::Watch* w = watch_;
    watch_ = nullptr;
    w->unfollow(this);
    w->release();
  }

  Exchange& ex_;
  watch::Hub& hub_;
  watch::Watch* watch_;  // leased until let_go()
  uint64_t after_ = 0;
  bool waiting_ = false;
  uint64_t last_sent_ms_ = 0;
};

}  // namespace

void start_watch_feed(Exchange& ex, watch::Hub& hub, watch::Watch& w, std::optional<uint64_t> since) {
  auto feed = std::make_unique<WatchFeed>(ex, hub, w);
  WatchFeed& f = *feed;
  ex.attach(std::move(feed));  // the Awaiter goes, and with it the wait's link
  f.start(since);
}

}  // namespace execd::files
