// execd/api/pty: see header. The holder's and the viewers' WebSockets get
// the replay, then `connected`, then live output (execd/sessions/pty).
#include "execd/api/pty.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "execd/api/api.h"
#include "execd/files/file_jobs.h"
#include "execd/limits.h"
#include "execd/http/websocket.h"
#include "protocol/errors.h"
#include "protocol/pty_frames.h"
#include "protocol/requests.h"
#include "protocol/websocket.h"

namespace execd::api {

namespace codes = protocol::codes;
using http::Exchange;
using sessions::PtyClient;
using sessions::PtyEntry;
using sessions::PtyRegistry;
using sessions::PtyViewer;

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
