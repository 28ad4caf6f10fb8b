// execd/sessions/pty: see header.
#include "execd/sessions/pty.h"

#include <unistd.h>

#include "execd/clock.h"
#include "execd/ids.h"
#include "execd/journal/entries.h"
#include "execd/journal/journal.h"

namespace execd::sessions {

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

pty::SpawnOptions spawn_options(const Context& ctx, const PtyEntry& e, bool use_pty) {
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

}  // namespace execd::sessions
