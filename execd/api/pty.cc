// execd/api/pty: see header. Output always goes to the replay ring; with a
// client attached it is also framed to the client, and the pump pauses while
// the client's WebSocket is behind.
#include "execd/api/pty.h"

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "execd/journal/entries.h"
#include "execd/api/api.h"
#include "execd/api/file_jobs.h"
#include "execd/clock.h"
#include "execd/ids.h"
#include "execd/limits.h"
#include "execd/http/websocket.h"
#include "execd/link.h"
#include "fs/paths.h"
#include "protocol/errors.h"
#include "protocol/pty_frames.h"
#include "protocol/requests.h"
#include "protocol/websocket.h"
#include "pty/pty_session.h"
#include "execd/api/activity.h"
#include "execd/journal/journal.h"

namespace execd::api {

namespace codes = protocol::codes;
using http::Exchange;

class PtyClient;
class PtyViewer;

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

PtyEntry::~PtyEntry() {
  session->set_listener(nullptr);
  std::vector<PtyViewer*> left;
  left.swap(viewers);
  for (PtyViewer* v : left) v->gone();
}

void PtyEntry::dismiss_viewers(int exit_code) {
  // Whatever the ring still holds past each viewer's place goes first.
  std::vector<PtyViewer*> left;
  left.swap(viewers);
  for (PtyViewer* v : left) {
    v->catch_up(/*even_if_behind=*/true);
    v->detach(exit_code);
  }
}

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

void PtyEntry::on_pty_output(pty::Stream s, const uint8_t* data, size_t len) {
  if (Activity* a = reg.activity()) a->note_output(unix_ms());
  if (!viewers.empty())
    for (PtyViewer* v : std::vector<PtyViewer*>(viewers)) v->output();  // (a send may end a viewer)
  PtyClient* c = client.get();
  if (!c) return;
  uint8_t channel = s == pty::Stream::err ? protocol::kPtyChannelStderr : protocol::kPtyChannelStdout;
  bool more = true;
  for (size_t off = 0; off < len; off += protocol::kPtyOutputChunkSize)
    more = c->ws.send_binary(channel, data + off, std::min(protocol::kPtyOutputChunkSize, len - off));
  if (!more) session->set_paused(true);
}

void PtyEntry::dismiss_client(int exit_code) {
  PtyClient* c = client.get();
  if (!c) return;
  client.cut();
  c->ws.send_text(protocol::pty_exit_json(exit_code));
  c->ws.close(protocol::ws_close::normal, "process exited");
}

void PtyEntry::on_pty_exit(int exit_code) {
  if (reg.journal().enabled())
    reg.journal().append(journal::pty_session_entry(id, command, cwd, getuid(), created_ns, exit_code));
  dismiss_client(exit_code);
  dismiss_viewers(exit_code);
}

void PtyEntry::stdin_drained() {
  if (PtyClient* c = client.get()) c->ws.resume_reading();
}

void PtyClient::write_stdin(std::string_view data) {
  PtyEntry* e = entry.get();
  if (!e || data.empty()) return;
  if (Activity* a = e->reg.activity()) a->note_input(unix_ms());
  if (!e->session->write_stdin(data.data(), data.size())) {
    error_frame(protocol::pty_error_code::stdin_write_failed, "stdin is closed");
    return;
  }
  // A client typing faster than the process reads waits on TCP, not in our memory.
  if (e->session->stdin_queued() > http::WriteQueue::kHighWater) ws.pause_reading();
}

void PtyClient::on_binary(std::string& data) {
  if (auto in = protocol::pty_stdin_from_binary(data)) write_stdin(*in);
}

void PtyClient::on_text(std::string& text) {
  PtyEntry* e = entry.get();
  if (!e) return;
  auto frame = protocol::parse_pty_client_text(text);
  if (auto* s = std::get_if<protocol::PtyStdinText>(&frame)) {
    write_stdin(s->data);
  } else if (auto* r = std::get_if<protocol::PtyResize>(&frame)) {
    if (r->applies()) e->session->resize(static_cast<unsigned short>(r->rows), static_cast<unsigned short>(r->cols));
  } else if (auto* sig = std::get_if<protocol::PtySignal>(&frame)) {
    if (auto n = protocol::pty_signal_number(sig->name)) e->session->send_signal(*n);
    else error_frame(protocol::pty_error_code::invalid_frame, "unsupported signal \"" + sig->name + "\"");
  } else if (std::get_if<protocol::PtyPing>(&frame)) {
    ws.send_text(protocol::pty_pong_json());
  } else if (auto* u = std::get_if<protocol::PtyUnknownType>(&frame)) {
    error_frame(protocol::pty_error_code::invalid_frame, protocol::pty_unknown_frame_type_message(u->type));
  } else {
    // Go ignores these silently; a client deserves to know its frame was dropped.
    error_frame(protocol::pty_error_code::invalid_frame, "invalid JSON control frame");
  }
}

// ---------------------------------------------------------------------------
// Registry

PtyRegistry::PtyRegistry(const Context& ctx, pty::Runtime& runtime, journal::Journal& journal)
    : ctx_(ctx), runtime_(runtime), journal_(journal) {}
PtyRegistry::~PtyRegistry() = default;

PtyEntry* PtyRegistry::create() {
  std::string id = random_uuid();
  auto e = std::make_unique<PtyEntry>(*this, id);
  PtyEntry* raw = e.get();
  entries_[id] = std::move(e);
  return raw;
}

PtyEntry* PtyRegistry::create_with_id(const std::string& id) {
  if (entries_.count(id)) return nullptr;
  auto e = std::make_unique<PtyEntry>(*this, id);
  PtyEntry* raw = e.get();
  entries_[id] = std::move(e);
  return raw;
}

PtyEntry* PtyRegistry::find(const std::string& id) {
  auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : it->second.get();
}

void PtyRegistry::remove(PtyEntry* e) {
  auto it = entries_.find(e->id);
  if (it == entries_.end()) return;
  std::unique_ptr<PtyEntry> owned = std::move(it->second);
  entries_.erase(it);
  e->deleted = true;
  if (e->session->running()) {
    e->session->set_paused(false);
    e->session->kill_all();
    dying_.push_back(std::move(owned));  // freed by reap() once its process is gone
    return;
  }
  e->dismiss_client(e->session->exited() ? e->session->exit_code() : -1);
  e->dismiss_viewers(e->session->exited() ? e->session->exit_code() : -1);
}

void PtyRegistry::reap() {
  std::vector<std::unique_ptr<PtyEntry>> keep;
  for (auto& e : dying_)
    if (e->session->running()) keep.push_back(std::move(e));
  dying_ = std::move(keep);
}

void PtyRegistry::remove_all() {
  std::vector<PtyEntry*> all;
  for (auto& [id, e] : entries_) all.push_back(e.get());
  for (PtyEntry* e : all) remove(e);
}

void PtyRegistry::kill_all() {
  for (auto& [id, e] : entries_) e->session->kill_all();
  for (auto& e : dying_) e->session->kill_all();
}

void PtyRegistry::clear() {
  entries_.clear();
  dying_.clear();
}

void PtyRegistry::actors(std::vector<std::string>& out) const {
  for (auto& [id, e] : entries_) out.push_back("pty:" + id);
}

size_t PtyRegistry::live_clients() const {
  size_t n = 0;
  for (auto& [id, e] : entries_) n += e->client ? 1 : 0;
  return n;
}

// ---------------------------------------------------------------------------
// Handlers

namespace {

std::string status_json(PtyEntry& e) {
  nlohmann::ordered_json j;
  j["session_id"] = e.id;
  j["running"] = e.session->running();
  j["output_offset"] = e.session->ring().end_offset();
  return j.dump();
}

void respond_not_found(Exchange& ex, const std::string& id) {
  ex.respond_error(404, codes::kContextNotFound, "pty session " + id + " not found");
}

void handle_create(PtyRegistry& reg, Exchange& ex) {
  auto decoded = protocol::decode_pty_create(ex.request().body);
  if (auto* err = std::get_if<protocol::DecodeError>(&decoded))
    return ex.respond_error(400, codes::kInvalidRequestBody, "error parsing request: " + err->message);
  std::string cwd_in = std::get<protocol::PtyCreateRequest>(decoded).cwd;
  std::string command = std::get<protocol::PtyCreateRequest>(decoded).command;
  if (!admit(ex, reg.count(), reg.ctx().config.max_ptys, "PTY sessions", "max-ptys") ||
      !admit_descriptors(ex, 6, "a PTY session"))
    return;
  auto prepared = std::make_shared<WorkingDir>();
  const Context& ctx = reg.ctx();
  run_blocking(
      ctx.loop, ex, [prepared, cwd_in, env = ctx.base_env] { *prepared = make_working_dir(env, cwd_in); },
      [&reg, prepared, command](Exchange& ex) {
        if (!prepared->error.empty())
          return ex.respond_error(500, codes::kRuntimeError, "error creating pty session: " + prepared->error);
        PtyEntry* e = reg.create();
        e->cwd = prepared->path;
        e->command = command;
        nlohmann::ordered_json j;
        j["session_id"] = e->id;
        ex.respond_json(201, j.dump());
      });
}

pty::SpawnOptions spawn_options(const Context& ctx, PtyEntry& e, bool use_pty) {
  pty::SpawnOptions o;
  o.program = ctx.shell;
  o.argv = {ctx.shell, "--norc", "--noprofile"};
  if (!e.command.empty()) {
    o.argv.emplace_back("-c");
    o.argv.push_back(e.command);
  }
  o.env = ctx.child_env();
  if (use_pty) {
    bool set = false;
    for (auto& kv : o.env)
      if (kv.rfind("TERM=", 0) == 0) {
        kv = "TERM=xterm-256color";
        set = true;
      }
    if (!set) o.env.emplace_back("TERM=xterm-256color");
  }
  o.cwd = e.cwd;
  o.use_pty = use_pty;
  o.rows = 24;
  o.cols = 80;
  return o;
}

// The `since` query: where a replay starts (absent or bad: 0).
uint64_t since_offset(const Exchange& ex) {
  const std::string* since_s = protocol::query_value(ex.query, "since");
  if (!since_s || since_s->empty()) return 0;
  long long v = strtoll(since_s->c_str(), nullptr, 10);
  return v > 0 ? static_cast<uint64_t>(v) : 0;
}

// GET /pty/{id}/ws?mode=viewer: any number (up to --max-pty-viewers), none
// of them the holder; the process is not started by a viewer.
void attach_viewer(PtyRegistry& reg, Exchange& ex, PtyEntry& e) {
  if (!admit(ex, e.viewers.size(), reg.ctx().config.max_pty_viewers, "viewers of this PTY session",
             "max-pty-viewers"))
    return;
  http::WebSocket* ws = http::WebSocket::accept(ex, static_cast<size_t>(reg.ctx().config.max_body_bytes));
  if (!ws) return;
  // Without `since`, from the oldest byte kept (no gap frame, as for the holder).
  uint64_t from = protocol::query_value(ex.query, "since") ? since_offset(ex) : e.session->ring().oldest_offset();
  auto owned = std::make_unique<PtyViewer>(*ws, e, from);
  PtyViewer* viewer = owned.get();
  ws->set_handler(std::move(owned));
  pty::PtySession& s = *e.session;
  // The replay (a gap first if `since` is older than the ring), then
  // `connected`; live output follows from where the replay ended.
  viewer->catch_up();
  ws->send_text(protocol::pty_viewer_connected_json(e.id, s.pty_mode() ? "pty" : "pipe"));
  if (s.exited()) {
    std::erase(e.viewers, viewer);
    viewer->detach(s.exit_code());
  }
}

void handle_attach(PtyRegistry& reg, Exchange& ex) {
  const std::string id = ex.params.get("id");
  PtyEntry* e = reg.find(id);
  if (!e) return respond_not_found(ex, id);
  const auto& r = ex.request();
  auto lookup = [&r](std::string_view name) -> std::optional<std::string_view> {
    std::string lower(name);
    for (auto& ch : lower) ch = static_cast<char>(tolower(static_cast<unsigned char>(ch)));
    const std::string* v = r.header(lower);
    if (!v) return std::nullopt;
    return std::string_view(*v);
  };
  const std::string* mode = protocol::query_value(ex.query, "mode");
  if (mode && *mode == "viewer") return attach_viewer(reg, ex, *e);
  if (mode && !mode->empty())
    return ex.respond_error(400, codes::kInvalidRequestBody, "unknown mode \"" + *mode + "\" (viewer)");
  const std::string* takeover = protocol::query_value(ex.query, "takeover");
  bool wants_takeover = takeover && *takeover == "1" && protocol::is_websocket_upgrade(lookup);
  if (e->client && !wants_takeover)
    return ex.respond_error(409, codes::kAlreadyConnected, "another client is already connected to pty session " + id);
  http::WebSocket* ws = http::WebSocket::accept(ex, static_cast<size_t>(reg.ctx().config.max_body_bytes));
  if (!ws) return;
  if (PtyClient* old = e->client.get()) {
    e->client.cut();
    old->ws.close(protocol::kPtyCloseTakenOver, "TAKEN_OVER");
  }
  auto owned = std::make_unique<PtyClient>(*ws);
  PtyClient* client = owned.get();
  ws->set_handler(std::move(owned));
  link(*e, e->client, *client, client->entry);

  pty::PtySession& s = *e->session;
  if (!s.started()) {
    const std::string* mode = protocol::query_value(ex.query, "pty");
    bool use_pty = !(mode && *mode == "0");
    std::string err;
    if (!s.start(spawn_options(reg.ctx(), *e, use_pty), err)) {
      spdlog::warn("pty session {} failed to start: {}", id, err);
      client->error_frame(protocol::pty_error_code::start_failed, err);
      e->client.cut();
      ws->close(protocol::ws_close::internal_error, "start failed");
      return;
    }
    spdlog::info("pty session {} started: pid {} ({})", id, s.pid(), use_pty ? "pty" : "pipe");
  }

  // Replay, then `connected`, then live output from exactly where the replay ended.
  const std::string* since_s = protocol::query_value(ex.query, "since");
  uint64_t since = since_offset(ex);
  pty::ReplayRing::Slice slice = s.ring().read_from(since);
  if (since_s && slice.gap) ws->send_text(protocol::pty_gap_json(static_cast<int64_t>(since), slice.start_offset));
  bool more = true;
  if (!slice.empty()) {
    auto head = protocol::pty_replay_header(slice.start_offset);
    std::string payload;
    payload.reserve(head.size() + slice.size());
    payload.append(reinterpret_cast<const char*>(head.data()), head.size());
    payload += slice.copy();
    more = ws->send_raw_binary(payload);
  }
  more = ws->send_text(protocol::pty_connected_json(id, s.pty_mode() ? "pty" : "pipe")) && more;
  if (s.exited()) {
    // No silent restart (the Go daemon re-runs the shell): the client learns
    // how the session ended and may replay its output.
    e->dismiss_client(s.exit_code());
    return;
  }
  s.set_paused(!more);
}

}  // namespace

bool create_pty_session(PtyRegistry& ptys, const std::string& id, const std::string& cwd, const std::string& command) {
  PtyEntry* e = ptys.create_with_id(id);
  if (!e) return false;
  e->cwd = cwd;
  e->command = command;
  return true;
}

bool pty_session_running(PtyRegistry& ptys, const std::string& id) {
  PtyEntry* e = ptys.find(id);
  return e && e->session->running();
}

void add_pty_routes(RouteTable& routes, PtyRegistry& ptys) {
  routes.add("POST", "/pty", [&ptys](Exchange& ex) { handle_create(ptys, ex); }, kStartsProcesses);
  routes.add("GET", "/pty/:id", [&ptys](Exchange& ex) {
    PtyEntry* e = ptys.find(ex.params.get("id"));
    if (!e) return respond_not_found(ex, ex.params.get("id"));
    ex.respond_json(200, status_json(*e));
  });
  routes.add("DELETE", "/pty/:id", [&ptys](Exchange& ex) {
    PtyEntry* e = ptys.find(ex.params.get("id"));
    if (!e) return respond_not_found(ex, ex.params.get("id"));
    ptys.remove(e);
    ex.respond_empty(200);
  });
  routes.add("GET", "/pty/:id/ws", [&ptys](Exchange& ex) { handle_attach(ptys, ex); });
}

}  // namespace execd::api
