// execd/sessions/pty: PTY sessions (OpenSandbox's PTY protocol, as the Go
// daemon 1.0.19 speaks it), the owner behind the /pty routes (execd/api/pty).
// The registry owns every PtyEntry from POST /pty until DELETE (and, if its
// process was still running, until that process has been reaped); an entry
// owns its pty::PtySession and is linked to at most one client and any
// number of read-only viewers, each a WebSocket handler owned by its
// WebSocket. Output always goes to the replay ring; with a client attached
// it is also framed to the client, and the pump pauses while the client's
// WebSocket is behind.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "execd/activity.h"
#include "execd/clock.h"
#include "execd/context.h"
#include "execd/http/websocket.h"
#include "execd/link.h"
#include "protocol/pty_frames.h"
#include "protocol/websocket.h"
#include "pty/pty_session.h"
#include "pty/runtime.h"

namespace execd::journal {
class Journal;
}

namespace execd::sessions {

class PtyClient;
class PtyViewer;
struct PtyEntry;

class PtyRegistry {
 public:
  PtyRegistry(const Context& ctx, pty::Runtime& runtime, journal::Journal& journal);
  ~PtyRegistry();
  const Context& ctx() const { return ctx_; }
  pty::Runtime& runtime() { return runtime_; }
  journal::Journal& journal() { return journal_; }

  PtyEntry* create();
  // A session under an id execd reserved elsewhere (POST /pty/operations);
  // nullptr when the id is taken.
  PtyEntry* create_with_id(const std::string& id);
  PtyEntry* find(const std::string& id);
  // Sessions held, removed ones whose process still runs included.
  size_t count() const { return entries_.size() + dying_.size(); }
  // Takes the entry out of the table; it is freed now, or after its process exits.
  void remove(PtyEntry* e);
  // remove() of every session (POST /internal/init's reset).
  void remove_all();
  // SIGKILL to every process of every session (daemon exit).
  void kill_all();
  // Frees every entry (daemon exit, after kill_all and with no client left).
  void clear();
  // Entries removed while running whose process has exited (from the sweep).
  void reap();
  size_t live_clients() const;
  // Where terminal output and input are noted (GET /activity); and each
  // session is an actor for track_changes while it lives.
  void set_activity(Activity* a) { activity_ = a; }
  Activity* activity() const { return activity_; }
  // "pty:<id>" of every session (the activity probe).
  void actors(std::vector<std::string>& out) const;

 private:
  const Context& ctx_;
  pty::Runtime& runtime_;
  journal::Journal& journal_;
  std::map<std::string, std::unique_ptr<PtyEntry>> entries_;
  std::vector<std::unique_ptr<PtyEntry>> dying_;
  Activity* activity_ = nullptr;
};

// One PTY session: its process (started by the first client), its replay
// ring, its client and viewers.
struct PtyEntry final : pty::PtyListener {
  PtyEntry(PtyRegistry& registry, std::string id_)
      : reg(registry),
        id(std::move(id_)),
        session(std::make_unique<pty::PtySession>(registry.runtime(),
                                                  static_cast<size_t>(registry.ctx().config.pty_replay_bytes))),
        created_ns(unix_ns()) {
    session->set_listener(this);
    session->set_on_stdin_drained([this] { stdin_drained(); });
  }
  ~PtyEntry() override;

  void on_pty_output(pty::Stream s, const uint8_t* data, size_t len) override;
  void on_pty_exit(int exit_code) override;
  void stdin_drained();
  // The client's WebSocket went away (its link is already cut).
  void client_gone() { session->set_paused(false); }  // nobody to wait for: output goes to the ring
  // Sends `exit` and closes the client's WebSocket; the link is cut.
  void dismiss_client(int exit_code);
  // The same for every viewer.
  void dismiss_viewers(int exit_code);

  PtyRegistry& reg;
  std::string id, cwd, command;
  std::unique_ptr<pty::PtySession> session;
  int64_t created_ns;
  Link<PtyClient> client;
  // Read-only viewers (?mode=viewer), each owned by its WebSocket; one
  // leaves this list when its WebSocket goes, and the entry's end detaches
  // those left.
  std::vector<PtyViewer*> viewers;
  bool deleted = false;
};

// A read-only viewer: the replay, then the live output as replay frames
// (each with its absolute offset), read from the ring. A viewer that falls
// behind is skipped, never waited for (the process and the holder go on),
// and catches up from the ring when its WebSocket drains, with a gap frame
// if the ring has moved past what it had.
class PtyViewer final : public http::WsHandler {
 public:
  static constexpr size_t kFrameBytes = 64 * 1024;
  PtyViewer(http::WebSocket& ws, PtyEntry& e, uint64_t from) : ws(ws), entry_(&e), next_(from) {
    e.viewers.push_back(this);
  }
  ~PtyViewer() override {
    if (entry_) std::erase(entry_->viewers, this);
  }
  void on_text(std::string& text) override {
    auto frame = protocol::parse_pty_client_text(text);
    if (std::get_if<protocol::PtyPing>(&frame)) {
      ws.send_text(protocol::pty_pong_json());
    } else if (std::get_if<protocol::PtyStdinText>(&frame) || std::get_if<protocol::PtyResize>(&frame) ||
               std::get_if<protocol::PtySignal>(&frame)) {
      refuse();
    } else if (auto* u = std::get_if<protocol::PtyUnknownType>(&frame)) {
      ws.send_text(protocol::pty_error_json(protocol::pty_error_code::invalid_frame,
                                            protocol::pty_unknown_frame_type_message(u->type)));
    } else {
      ws.send_text(protocol::pty_error_json(protocol::pty_error_code::invalid_frame, "invalid JSON control frame"));
    }
  }
  void on_binary(std::string&) override { refuse(); }  // every client binary frame is stdin
  void proceed() override {
    behind_ = false;
    catch_up();
  }
  // New output is in the ring.
  void output() {
    if (!behind_) catch_up();
  }
  // Sends what the ring holds past next_, as long as the peer keeps up (or,
  // at the session's end, all of it: at most the ring's size is queued).
  void catch_up(bool even_if_behind = false) {
    const pty::ReplayRing& ring = entry_->session->ring();
    while ((even_if_behind || !behind_) && next_ < ring.end_offset()) {
      pty::ReplayRing::Slice slice = ring.read_from(next_, kFrameBytes);
      if (slice.gap)
        ws.send_text(protocol::pty_gap_json(static_cast<int64_t>(next_), slice.start_offset));
      auto head = protocol::pty_replay_header(slice.start_offset);
      std::string payload;
      payload.reserve(head.size() + slice.size());
      payload.append(reinterpret_cast<const char*>(head.data()), head.size());
      payload += slice.copy();
      next_ = slice.end_offset();
      behind_ = !ws.send_raw_binary(payload);
    }
  }
  // The session ended or went: `exit`, then the close.
  void detach(int exit_code) {
    entry_ = nullptr;
    ws.send_text(protocol::pty_exit_json(exit_code));
    ws.close(protocol::ws_close::normal, "process exited");
  }
  void gone() {
    entry_ = nullptr;
    ws.close(protocol::ws_close::normal, "session deleted");
  }

  http::WebSocket& ws;

 private:
  void refuse() {
    ws.send_text(protocol::pty_error_json(protocol::pty_error_code::read_only, "this connection is a read-only viewer"));
  }
  PtyEntry* entry_;
  uint64_t next_;
  bool behind_ = false;
};

// One attached WebSocket client; owned by its WebSocket.
class PtyClient final : public http::WsHandler {
 public:
  explicit PtyClient(http::WebSocket& ws) : ws(ws) {}
  ~PtyClient() override {
    if (PtyEntry* e = entry.get()) {
      entry.cut();
      e->client_gone();
    }
  }
  void error_frame(std::string_view code, std::string_view message) {
    ws.send_text(protocol::pty_error_json(code, message));
  }

  void on_text(std::string& text) override;
  void on_binary(std::string& data) override;
  void proceed() override {
    if (entry) entry->session->set_paused(false);
  }

  http::WebSocket& ws;
  Link<PtyEntry> entry;

 private:
  void write_stdin(std::string_view data);
};

// How the process of `e` is started: the shell (with `-c` and the session's
// command if it has one) in the session's directory, TERM=xterm-256color on
// a terminal, 24x80.
pty::SpawnOptions spawn_options(const Context& ctx, const PtyEntry& e, bool use_pty);

}  // namespace execd::sessions
