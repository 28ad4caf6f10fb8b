// execd/terminals: PTY sessions over the OpenSandbox WebSocket protocol
// (contract section 6). A PtyEntry is one session, owned by the registry from
// POST /pty until DELETE (and, if its process was still running, until that
// process has been reaped); it owns the pty::PtySession and knows the one
// PtyClient (attached WebSocket) at most. Output always goes to the replay
// ring; with a client attached it is also framed to the client, and the pump
// pauses while the client's write queue is over budget.
#include "execd/terminals.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "execd/ws_conn.h"
#include "fs/atomic_file.h"
#include "fs/paths.h"
#include "protocol/errors.h"
#include "protocol/pty_frames.h"
#include "protocol/websocket.h"
#include "pty/pty_session.h"

namespace execd {

namespace codes = protocol::codes;
using protocol::HttpRequest;
using protocol::QueryParams;
using protocol::RouteParams;

void register_terminals(Routes& routes, Context& ctx) {
  register_pty_routes(routes, ctx);
  register_bash_session_routes(routes, ctx);
  // execd going away takes every session's processes with it.
  std::atexit([] { kill_all_terminal_sessions(); });
}

bool prepare_session_cwd(const Context& ctx, const std::string& in, std::string& out, std::string& error) {
  out.clear();
  if (in.empty()) return true;
  auto expanded = fs::expand_path(in, [&](std::string_view n) { return env_lookup(ctx.base_env, n); });
  if (!expanded) {
    error = expanded.error().message;
    return false;
  }
  if (auto made = fs::make_directory_tree(expanded.value()); !made) {
    error = made.error().message;
    return false;
  }
  out = expanded.value();
  return true;
}

namespace {

class PtyRegistry;
struct PtyEntry;

// One attached WebSocket client.
class PtyClient : public WsHandler {
 public:
  PtyClient(PtyEntry* entry, WsConnection* ws) : entry_(entry), ws_(ws) {}
  WsConnection* ws() { return ws_; }
  void forget_entry() { entry_ = nullptr; }
  void error_frame(std::string_view code, std::string_view message) {
    if (ws_) ws_->send_text(protocol::pty_error_json(code, message));
  }

  void on_ws_text(std::string& text) override;
  void on_ws_binary(std::string& data) override;
  void on_ws_writable() override;
  void on_ws_closed() override;

 private:
  void write_stdin(std::string_view data);
  PtyEntry* entry_;
  WsConnection* ws_;
};

struct PtyEntry : pty::PtyListener {
  PtyEntry(PtyRegistry& r, Context& ctx, std::string id_)
      : reg(r), id(std::move(id_)),
        session(std::make_unique<pty::PtySession>(ctx.loop, *ctx.reaper,
                                                  static_cast<size_t>(ctx.config.pty_replay_bytes))) {
    session->set_listener(this);
    session->set_on_stdin_drained([this] {
      if (client && client->ws()) client->ws()->resume_reading();
    });
  }

  void on_pty_output(pty::Stream s, const uint8_t* data, size_t len) override {
    if (!client || !client->ws()) return;
    WsConnection* ws = client->ws();
    uint8_t channel = s == pty::Stream::err ? protocol::kPtyChannelStderr : protocol::kPtyChannelStdout;
    for (size_t off = 0; off < len; off += protocol::kPtyOutputChunkSize)
      ws->send_binary(channel, data + off, std::min(protocol::kPtyOutputChunkSize, len - off));
    if (ws->over_budget()) session->set_paused(true);
  }

  void on_pty_exit(int exit_code) override;
  void detach_client();

  PtyRegistry& reg;
  std::string id, cwd, command;
  std::unique_ptr<pty::PtySession> session;
  PtyClient* client = nullptr;
  bool deleted = false;
};

class PtyRegistry {
 public:
  explicit PtyRegistry(Context& ctx) : ctx_(ctx) {
    uv_timer_init(ctx.loop, &reap_timer_);
    reap_timer_.data = this;
    uv_unref(reinterpret_cast<uv_handle_t*>(&reap_timer_));
  }
  Context& ctx() { return ctx_; }

  PtyEntry* create() {
    std::string id = random_uuid();
    auto e = std::make_unique<PtyEntry>(*this, ctx_, id);
    PtyEntry* raw = e.get();
    entries_[id] = std::move(e);
    return raw;
  }
  PtyEntry* find(const std::string& id) {
    auto it = entries_.find(id);
    return it == entries_.end() ? nullptr : it->second.get();
  }
  // Removes the entry from the table; it is freed now or after its process exits.
  void remove(PtyEntry* e) {
    auto it = entries_.find(e->id);
    if (it == entries_.end()) return;
    std::unique_ptr<PtyEntry> owned = std::move(it->second);
    entries_.erase(it);
    e->deleted = true;
    if (e->session->running()) {
      e->session->set_paused(false);
      e->session->kill_all();
      dying_.push_back(std::move(owned));  // freed after on_pty_exit
      return;
    }
    e->detach_client();
  }
  // Frees deleted entries whose process is gone, outside their callbacks.
  void schedule_reap() {
    uv_timer_start(&reap_timer_, [](uv_timer_t* t) { static_cast<PtyRegistry*>(t->data)->reap(); }, 0, 0);
  }

 private:
  void reap() {
    std::vector<std::unique_ptr<PtyEntry>> keep;
    for (auto& e : dying_)
      if (e->session->running()) keep.push_back(std::move(e));
    dying_ = std::move(keep);
  }

  Context& ctx_;
  std::map<std::string, std::unique_ptr<PtyEntry>> entries_;
  std::vector<std::unique_ptr<PtyEntry>> dying_;
  uv_timer_t reap_timer_;

 public:
  void kill_all() {
    for (auto& [id, e] : entries_) e->session->kill_all();
    for (auto& e : dying_) e->session->kill_all();
  }
};

PtyRegistry* g_pty_registry = nullptr;

void PtyEntry::detach_client() {
  if (!client) return;
  PtyClient* c = client;
  client = nullptr;
  c->forget_entry();
  if (c->ws()) {
    c->ws()->send_text(protocol::pty_exit_json(session->exited() ? session->exit_code() : -1));
    c->ws()->close(protocol::ws_close::normal, "process exited");
  }
}

void PtyEntry::on_pty_exit(int exit_code) {
  if (client) {
    PtyClient* c = client;
    client = nullptr;
    c->forget_entry();
    if (c->ws()) {
      c->ws()->send_text(protocol::pty_exit_json(exit_code));
      c->ws()->close(protocol::ws_close::normal, "process exited");
    }
  }
  if (deleted) reg.schedule_reap();
}

void PtyClient::write_stdin(std::string_view data) {
  if (!entry_ || data.empty()) return;
  if (!entry_->session->write_stdin(data.data(), data.size())) {
    error_frame(protocol::pty_error_code::stdin_write_failed, "stdin is closed");
    return;
  }
  // A client typing faster than the process reads waits on TCP, not in our memory.
  if (entry_->session->stdin_queued() > Connection::kStreamBudget && ws_) ws_->pause_reading();
}

void PtyClient::on_ws_binary(std::string& data) {
  if (auto in = protocol::pty_stdin_from_binary(data)) write_stdin(*in);
}

void PtyClient::on_ws_text(std::string& text) {
  if (!entry_) return;
  auto frame = protocol::parse_pty_client_text(text);
  if (auto* s = std::get_if<protocol::PtyStdinText>(&frame)) {
    write_stdin(s->data);
  } else if (auto* r = std::get_if<protocol::PtyResize>(&frame)) {
    if (r->applies())
      entry_->session->resize(static_cast<unsigned short>(r->rows), static_cast<unsigned short>(r->cols));
  } else if (auto* sig = std::get_if<protocol::PtySignal>(&frame)) {
    if (auto n = protocol::pty_signal_number(sig->name)) entry_->session->send_signal(*n);
    else error_frame(protocol::pty_error_code::invalid_frame, "unsupported signal \"" + sig->name + "\"");
  } else if (std::get_if<protocol::PtyPing>(&frame)) {
    if (ws_) ws_->send_text(protocol::pty_pong_json());
  } else if (auto* u = std::get_if<protocol::PtyUnknownType>(&frame)) {
    error_frame(protocol::pty_error_code::invalid_frame, protocol::pty_unknown_frame_type_message(u->type));
  } else {
    // Go ignores these silently; a client deserves to know its frame was dropped.
    error_frame(protocol::pty_error_code::invalid_frame, "invalid JSON control frame");
  }
}

void PtyClient::on_ws_writable() {
  if (entry_ && ws_ && !ws_->over_budget()) entry_->session->set_paused(false);
}

void PtyClient::on_ws_closed() {
  ws_ = nullptr;
  if (entry_) {
    entry_->client = nullptr;
    entry_->session->set_paused(false);  // nobody to wait for: output goes to the ring
    entry_ = nullptr;
  }
  delete this;
}

// ---------------------------------------------------------------------------
// Handlers

std::string status_json(PtyEntry& e) {
  nlohmann::ordered_json j;
  j["session_id"] = e.id;
  j["running"] = e.session->running();
  j["output_offset"] = e.session->ring().end_offset();
  return j.dump();
}

void respond_not_found(Connection& c, const std::string& id) {
  c.respond_error(404, codes::kContextNotFound, "pty session " + id + " not found");
}

void handle_create(PtyRegistry& reg, Connection& c, HttpRequest& r) {
  std::string cwd_in, command;
  if (!r.body.empty()) {
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      c.respond_error(400, codes::kInvalidRequestBody, "error parsing request: invalid JSON body");
      return;
    }
    auto str = [&](const char* key, std::string& out) -> bool {
      auto it = j.find(key);
      if (it == j.end() || it->is_null()) return true;
      if (!it->is_string()) return false;
      out = it->get<std::string>();
      return true;
    };
    if (!str("cwd", cwd_in) || !str("command", command)) {
      c.respond_error(400, codes::kInvalidRequestBody, "error parsing request: cwd and command must be strings");
      return;
    }
  }
  std::string cwd, err;
  if (!prepare_session_cwd(reg.ctx(), cwd_in, cwd, err)) {
    c.respond_error(500, codes::kRuntimeError, "error creating pty session: " + err);
    return;
  }
  PtyEntry* e = reg.create();
  e->cwd = cwd;
  e->command = command;
  nlohmann::ordered_json j;
  j["session_id"] = e->id;
  c.respond_json(201, j.dump());
}

pty::SpawnOptions spawn_options(Context& ctx, PtyEntry& e, bool use_pty) {
  pty::SpawnOptions o;
  o.program = ctx.shell;
  o.argv = {ctx.shell, "--norc", "--noprofile"};
  if (!e.command.empty()) {
    o.argv.emplace_back("-c");
    o.argv.push_back(e.command);
  }
  o.env = ctx.base_env;
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

void handle_attach(PtyRegistry& reg, Connection& c, HttpRequest& r, const std::string& id, const QueryParams& q) {
  PtyEntry* e = reg.find(id);
  if (!e) {
    respond_not_found(c, id);
    return;
  }
  auto lookup = [&r](std::string_view name) -> std::optional<std::string_view> {
    std::string lower(name);
    for (auto& ch : lower) ch = static_cast<char>(tolower(static_cast<unsigned char>(ch)));
    const std::string* v = r.header(lower);
    if (!v) return std::nullopt;
    return std::string_view(*v);
  };
  const std::string* takeover = protocol::query_value(q, "takeover");
  bool wants_takeover = takeover && *takeover == "1" && protocol::is_websocket_upgrade(lookup);
  if (e->client && !wants_takeover) {
    c.respond_error(409, codes::kAlreadyConnected, "another client is already connected to pty session " + id);
    return;
  }
  WsConnection* ws = WsConnection::accept(c, r, static_cast<size_t>(reg.ctx().config.max_body_bytes));
  if (!ws) return;
  if (e->client) {
    PtyClient* old = e->client;
    e->client = nullptr;
    old->forget_entry();
    if (old->ws()) old->ws()->close(protocol::kPtyCloseTakenOver, "TAKEN_OVER");
  }
  auto* client = new PtyClient(e, ws);
  ws->set_handler(client);
  e->client = client;

  pty::PtySession& s = *e->session;
  if (!s.started()) {
    const std::string* mode = protocol::query_value(q, "pty");
    bool use_pty = !(mode && *mode == "0");
    std::string err;
    if (!s.start(spawn_options(reg.ctx(), *e, use_pty), err)) {
      spdlog::warn("pty session {} failed to start: {}", id, err);
      client->error_frame(protocol::pty_error_code::start_failed, err);
      e->client = nullptr;
      client->forget_entry();
      ws->close(protocol::ws_close::internal_error, "start failed");
      return;
    }
    spdlog::info("pty session {} started: pid {} ({})", id, s.pid(), use_pty ? "pty" : "pipe");
  }

  // Replay, then `connected`, then live output from exactly where the replay ended.
  const std::string* since_s = protocol::query_value(q, "since");
  uint64_t since = 0;
  if (since_s && !since_s->empty()) {
    long long v = strtoll(since_s->c_str(), nullptr, 10);
    since = v > 0 ? static_cast<uint64_t>(v) : 0;
  }
  pty::ReplayRing::Slice slice = s.ring().read_from(since);
  if (since_s && slice.gap)
    ws->send_text(protocol::pty_gap_json(static_cast<int64_t>(since), slice.start_offset));
  if (!slice.empty()) {
    auto head = protocol::pty_replay_header(slice.start_offset);
    std::string payload;
    payload.reserve(head.size() + slice.size());
    payload.append(reinterpret_cast<const char*>(head.data()), head.size());
    payload += slice.copy();
    ws->send_raw_binary(payload);
  }
  ws->send_text(protocol::pty_connected_json(id, s.pty_mode() ? "pty" : "pipe"));
  if (s.exited()) {
    // No silent restart (the Go daemon re-runs the shell): the client learns
    // how the session ended and may replay its output.
    e->client = nullptr;
    client->forget_entry();
    ws->send_text(protocol::pty_exit_json(s.exit_code()));
    ws->close(protocol::ws_close::normal, "process exited");
    return;
  }
  s.set_paused(ws->over_budget());
}

}  // namespace

void kill_all_pty_sessions() {
  if (g_pty_registry) g_pty_registry->kill_all();
}

void register_pty_routes(Routes& routes, Context& ctx) {
  static PtyRegistry* reg = new PtyRegistry(ctx);  // lives as long as the process
  g_pty_registry = reg;
  routes.add("POST", "/pty", [](Connection& c, HttpRequest& r, const RouteParams&, const QueryParams&) {
    handle_create(*reg, c, r);
  });
  routes.add("GET", "/pty/:id", [](Connection& c, HttpRequest&, const RouteParams& p, const QueryParams&) {
    PtyEntry* e = reg->find(p.get("id"));
    if (!e) return respond_not_found(c, p.get("id"));
    c.respond_json(200, status_json(*e));
  });
  routes.add("DELETE", "/pty/:id", [](Connection& c, HttpRequest&, const RouteParams& p, const QueryParams&) {
    PtyEntry* e = reg->find(p.get("id"));
    if (!e) return respond_not_found(c, p.get("id"));
    reg->remove(e);
    c.respond_empty(200);
  });
  routes.add("GET", "/pty/:id/ws", [](Connection& c, HttpRequest& r, const RouteParams& p, const QueryParams& q) {
    handle_attach(*reg, c, r, p.get("id"), q);
  });
}

}  // namespace execd
