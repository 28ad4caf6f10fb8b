// execd/runners/code: see header.
#include "execd/runners/code.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "execd/clock.h"
#include "execd/ids.h"
#include "protocol/errors.h"
#include "protocol/json_text.h"

namespace execd::runners {

namespace codes = protocol::codes;
using json = nlohmann::json;

namespace {

constexpr uint64_t kTickMs = 100;
constexpr uint64_t kStartTimeoutMs = 30000;
constexpr uint64_t kKernelInfoRetryMs = 500;
constexpr uint64_t kHeartbeatIntervalMs = 1000;
constexpr uint64_t kShutdownGraceMs = 2000;
constexpr uint64_t kSigintRepeatMs = 500;
// The kernel sends its execute reply on shell before it publishes idle on
// iopub; the two sockets may deliver out of order, but not by this much.
constexpr uint64_t kReplyAfterIdleMs = 1000;
// The other way round, a kernel whose loop stopped right after its reply
// never publishes idle: once its iopub has been quiet this long after the
// reply, the run ends with the reply's status.
constexpr uint64_t kIdleAfterReplyMs = 5000;
constexpr size_t kStderrTail = 2048;
// Stream messages above this are handed on in pieces of this size.
constexpr size_t kStreamPieceBytes = 1 << 20;

// Overridable for tests of a silent kernel.
uint64_t ms_from(const std::vector<std::string>& env, const char* name, uint64_t fallback) {
  const char* v = env_lookup(env, name);
  long n = v ? atol(v) : 0;
  return n > 0 ? static_cast<uint64_t>(n) : fallback;
}

std::string describe_exit(const pty::Outcome& o) {
  if (o.exit_code) return "exit status " + std::to_string(*o.exit_code);
  if (o.signal) return std::string("signal ") + pty::signal_name(o.signal) + " (" + pty::signal_description(o.signal) + ")";
  return "exited";
}

}  // namespace


CodeRegistryImpl::CodeRegistryImpl(const Context& c, pty::Runtime& rt, exec::LaunchPath& l)
    : ctx(c), runtime(rt), executions(l.executions()), launches(l),
      heartbeat_timeout_ms(ms_from(c.base_env, "EXECD_KERNEL_HEARTBEAT_TIMEOUT_MS", 5000)),
      take_timeout_ms(ms_from(c.base_env, "EXECD_KERNEL_TAKE_TIMEOUT_MS", 20000)) {}

void CodeContext::ensure_started() {
  if (state_ == State::stopped) start();
}

void CodeContext::wait_ready(http::Exchange& ex) {
  auto w = std::make_unique<ReadyWaiter>();
  http::await(ex, *w);
  waiters_.push_back(std::move(w));
}

void CodeContext::begin_run(CodeRun& run) {
  link(*this, run_, run, run.context);
  if (state_ == State::ready) send_execute();
  else ensure_started();
}

void CodeContext::interrupt() {
  if (run_ && run_->reply_seen) return;  // done executing; only its idle status is still to come
  if (run_ && !run_->sent) {
    run_->reply.status = "aborted";
    finish_run("interrupted");
    return;
  }
  if (!spec_.interrupt_by_message && run_ && !run_->executing) {
    run_->interrupt_pending = true;
    return;
  }
  deliver_interrupt();
}

void CodeContext::deliver_interrupt() {
  if (state_ != State::ready || !cmd_) return;
  if (run_) run_->interrupted = true;
  if (spec_.interrupt_by_message) {
    if (channels_)
      channels_->send(KernelChannel::control,
                      jp::make_request("interrupt_request", random_uuid(), session_, "{}"));
  } else {
    cmd_->signal_group(SIGINT);
    if (run_) run_->last_sigint = uv_now(reg_.ctx.loop);
  }
}

void CodeContext::shut_down() {
  if (run_) {
    run_->sink.event(jp::error_event("ContextDeleted", "the code context was deleted", {}, unix_ms()));
    finish_run("aborted");
  }
  fail_waiters("the code context was deleted");
  if (!cmd_) {
    state_ = State::stopped;
    reg_.forget(this);
    return;
  }
  state_ = State::stopping;
  stop_started_ = uv_now(reg_.ctx.loop);
  if (channels_)
    channels_->send(KernelChannel::control,
                    jp::make_request("shutdown_request", random_uuid(), session_, "{\"restart\":false}"));
  uv_timer_start(&timer_, on_timer, kTickMs, kTickMs);
}

void CodeContext::kill() {
  if (cmd_) cmd_->signal_group(SIGKILL);
}

void CodeContext::restart(http::Exchange& ex) {
  if (run_) {
    run_->sink.event(jp::error_event("ContextRestarting", "the context was restarted", {}, unix_ms()));
    finish_run("aborted");
  }
  wait_ready(ex);
  if (!cmd_) {
    if (state_ == State::stopped) start();
    return;
  }
  if (state_ == State::stopping) return;  // being deleted: the waiter hears so
  restart_pending_ = true;
  death_reason_ = "restarted";
  cmd_->signal_group(SIGKILL);
}

void CodeContext::on_thaw(uint64_t frozen_ms) {
  uint64_t now = uv_now(reg_.ctx.loop);
  last_heartbeat_ = now;
  started_ += frozen_ms;
  if (run_) {
    if (run_->idle_at) run_->idle_at += frozen_ms;
    if (run_->last_sigint) run_->last_sigint += frozen_ms;
    if (run_->sent_at) run_->sent_at += frozen_ms;
    if (run_->reply_at) run_->reply_at += frozen_ms;
    if (run_->last_iopub_at) run_->last_iopub_at += frozen_ms;
  }
}

void CodeContext::destroy() {
  reg_.runtime.containment.remove_freeze_listener(this);
  big_content_ = nullptr;
  if (channels_) channels_->close();
  channels_ = nullptr;
  if (cmd_) cmd_->release();
  cmd_ = nullptr;
  remove_connection_file();
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_),
           [](uv_handle_t* h) { delete static_cast<CodeContext*>(h->data); });
}

void CodeContext::on_output(pty::Stream, const uint8_t* data, size_t len) {
  stderr_tail_.append(reinterpret_cast<const char*>(data), len);
  if (stderr_tail_.size() > 2 * kStderrTail) stderr_tail_.erase(0, stderr_tail_.size() - kStderrTail);
}

void CodeContext::on_finished(const pty::Outcome& o) {
  std::string reason = death_reason_.empty() ? "the kernel process ended: " + describe_exit(o) : death_reason_;
  spdlog::info("code context {}: kernel {} ({})", id_, cmd_ ? cmd_->pid() : -1, reason);
  if (cmd_) cmd_->release();
  cmd_ = nullptr;
  big_content_ = nullptr;
  if (channels_) channels_->close();
  channels_ = nullptr;
  remove_connection_file();
  uv_timer_stop(&timer_);
  State was = state_;
  state_ = State::stopped;
  death_reason_.clear();
  if (was == State::stopping) {
    reg_.forget(this);
    return;
  }
  if (restart_pending_) {
    restart_pending_ = false;
    return start();
  }
  std::string detail = reason;
  std::string tail = stderr_tail();
  if (was == State::starting) {
    if (!tail.empty()) detail += "; kernel output: " + tail;
    fail_start("kernel " + spec_.name + " failed to start: " + detail);
    return;
  }
  if (run_) {
    std::vector<std::string> tb{reason};
    if (!tail.empty()) tb.push_back(tail);
    run_->sink.event(jp::error_event("KernelDied", reason, tb, unix_ms()));
    finish_run("died");
  }
}

void CodeContext::on_kernel_messages_dropped(KernelChannel ch, uint64_t count, uint64_t bytes) {
  if (!run_ || ch != KernelChannel::iopub) return;
  std::string note = "execd: the kernel sent " + std::to_string(count) + " message(s) larger than " +
                     "--max-kernel-message (" + std::to_string(reg_.ctx.config.max_kernel_message_bytes) +
                     " bytes), " + std::to_string(bytes) + " bytes in all; skipped\n";
  run_->sink.output(exec::kStderr, reinterpret_cast<const uint8_t*>(note.data()), note.size());
}

void CodeContext::on_channel_failed(KernelChannel ch, const std::string& why) {
  if (death_reason_.empty())
    death_reason_ = std::string("the kernel broke the wire protocol on its ") + channel_name(ch) + " channel: " + why;
  kill();
}

bool CodeContext::on_kernel_message(KernelChannel ch, const jp::WireView& m) {
  auto env = jp::read_envelope(m);
  if (!env) return true;
  switch (ch) {
    case KernelChannel::shell:
      if (env->msg_type == "kernel_info_reply") {
        shell_ready_ = true;
        maybe_ready();
      } else if (env->msg_type == "execute_reply" && run_ && run_->sent && env->parent_msg_id == run_->msg_id) {
        run_->taken = true;
        run_->reply_at = uv_now(reg_.ctx.loop);
        if (auto c = jp::read_content(m.content)) {
          run_->reply = std::move(*c);
          if (run_->reply.execution_count) run_->count = run_->reply.execution_count;
        }
        run_->reply_seen = true;
        maybe_finish_run();
      }
      return true;
    case KernelChannel::iopub:
      if (state_ == State::starting) {
        iopub_seen_ = true;
        maybe_ready();
      }
      if (run_ && run_->sent && env->parent_msg_id == run_->msg_id) {
        run_->taken = true;
        run_->last_iopub_at = uv_now(reg_.ctx.loop);
        return on_iopub(env->msg_type, m.content);
      }
      return true;
    case KernelChannel::stdin_:
      if (env->msg_type == "input_request") answer_input(m.header);
      return true;
    case KernelChannel::control:
    case KernelChannel::hb:
      return true;
  }
  return true;
}

void CodeContext::resume_output() {
  if (channels_) channels_->resume(KernelChannel::iopub);
}

void CodeContext::start() {
  state_ = State::starting;
  shell_ready_ = iopub_seen_ = false;
  stderr_tail_.clear();
  death_reason_.clear();
  std::string error;
  pty::KernelConnection& conn = conn_;
  pty::SpawnOptions opts;
  conn_file_ = reg_.ctx.config.state_dir + "/kernel-" + id_ + ".json";
  if (!pty::allocate_connection(conn, reg_.ctx.config.state_dir + "/k-" + id_.substr(0, 12), error) ||
      !pty::write_connection_file(conn_file_, conn.to_json(spec_.name), error) ||
      !pty::kernel_spawn_options(spec_, conn_file_, reg_.ctx.child_env(), cwd_, opts, error)) {
    remove_connection_file();
    state_ = State::stopped;
    return fail_start("kernel " + spec_.name + " cannot start: " + error);
  }
  pty::CommandLimits limits;
  limits.kill_grace_ms = reg_.ctx.config.kill_grace_ms;
  started_ = uv_now(reg_.ctx.loop);
  cmd_ = pty::Command::start(reg_.runtime, opts, limits, this, error);
  if (!cmd_) {
    remove_connection_file();
    state_ = State::stopped;
    return fail_start("kernel " + spec_.name + " cannot start: " + error);
  }
  spdlog::info("code context {}: kernel {} started, pid {}", id_, spec_.name, cmd_->pid());
  session_ = random_uuid();
  channels_ = KernelChannels::connect(reg_.ctx.loop, conn, *this,
                                      static_cast<uint64_t>(reg_.ctx.config.max_kernel_message_bytes), error);
  if (!channels_) {
    death_reason_ = "cannot connect to the kernel: " + error;
    cmd_->signal_group(SIGKILL);
    return;
  }
  send_kernel_info();
  uv_timer_start(&timer_, on_timer, kTickMs, kTickMs);
}

void CodeContext::send_kernel_info() {
  last_info_sent_ = uv_now(reg_.ctx.loop);
  channels_->send(KernelChannel::shell, jp::make_request("kernel_info_request", random_uuid(), session_, "{}"));
}

void CodeContext::maybe_ready() {
  if (state_ != State::starting || !shell_ready_ || !iopub_seen_) return;
  state_ = State::ready;
  ever_ready_ = true;
  last_heartbeat_ = uv_now(reg_.ctx.loop);
  last_ping_ = 0;
  spdlog::info("code context {}: kernel ready after {} ms", id_, uv_now(reg_.ctx.loop) - started_);
  auto waiters = std::move(waiters_);
  for (auto& w : waiters)
    if (http::Exchange* ex = w->exchange()) ex->respond_json(200, describe(true).dump(-1, ' ', false, json::error_handler_t::replace));
  if (run_ && !run_->sent) send_execute();
}

void CodeContext::tick() {
  if (reg_.runtime.containment.frozen()) return;
  uint64_t now = uv_now(reg_.ctx.loop);
  // Time the loop itself was held up (a large kernel message verified in
  // one go, a loaded machine) does not count against the kernel: its
  // heartbeat reply may be sitting unread in the socket meanwhile.
  if (last_tick_ && now - last_tick_ > 2 * kTickMs) {
    uint64_t held = now - last_tick_ - kTickMs;
    last_heartbeat_ = std::min(now, last_heartbeat_ + held);
    if (run_ && run_->sent_at) run_->sent_at = std::min(now, run_->sent_at + held);
  }
  last_tick_ = now;
  switch (state_) {
    case State::starting:
      if (now - started_ > kStartTimeoutMs) {
        death_reason_ = "the kernel did not answer within " + std::to_string(kStartTimeoutMs / 1000) + " s";
        kill();
      } else if (!iopub_seen_ && now - last_info_sent_ >= (shell_ready_ ? kTickMs : kKernelInfoRetryMs)) {
        send_kernel_info();
      }
      return;
    case State::ready:
      if (now - last_heartbeat_ > reg_.heartbeat_timeout_ms) {
        death_reason_ = "the kernel stopped answering heartbeats for " + std::to_string(reg_.heartbeat_timeout_ms) + " ms";
        spdlog::warn("code context {}: {}", id_, death_reason_);
        kill();
        uv_timer_stop(&timer_);
      } else if (channels_ && now - last_ping_ >= kHeartbeatIntervalMs) {
        if (channels_->ping()) last_ping_ = now;
      }
      // A kernel whose request loop has stopped (ipykernel's, when a
      // SIGINT lands just as it leaves a request handler: its main thread
      // ends while another thread keeps the process and the heartbeat up)
      // would hold the run and the context for good. A kernel publishes
      // busy before it handles a request, so one that has not taken the run
      // in this time will not: it is ended, the run says why, and the
      // context's next run starts a fresh kernel.
      if (run_ && run_->sent_at && !run_->taken && now - run_->sent_at > reg_.take_timeout_ms) {
        death_reason_ = "the kernel did not take the request in " + std::to_string(reg_.take_timeout_ms) +
                        " ms although it answered heartbeats (its request loop has stopped); execd ended it";
        spdlog::warn("code context {}: {}", id_, death_reason_);
        kill();
        uv_timer_stop(&timer_);
        return;
      }
      // A SIGINT that lands in the kernel between requests is ignored
      // there; while the interrupted run goes on, say it again.
      // Never once the kernel shows the run is ending (its error, its idle
      // status or its reply): it is leaving its handler then, and a SIGINT
      // landing there is what stops ipykernel's request loop (above).
      if (run_ && run_->last_sigint && !run_->reply_seen && !run_->idle_seen && !run_->error_sent &&
          now - run_->last_sigint >= kSigintRepeatMs)
        deliver_interrupt();
      if (run_ && run_->idle_seen && !run_->reply_seen && now - run_->idle_at >= kReplyAfterIdleMs)
        end_run_without_reply();
      else if (run_ && run_->reply_seen && !run_->idle_seen && !run_->paused &&
               now - std::max(run_->reply_at, run_->last_iopub_at) >= kIdleAfterReplyMs) {
        spdlog::warn("code context {}: the kernel replied but did not go idle in {} ms; the run ends", id_,
                     kIdleAfterReplyMs);
        run_->idle_seen = true;
        maybe_finish_run();
      }
      return;
    case State::stopping:
      if (!term_sent_ && now - stop_started_ > kShutdownGraceMs && cmd_) {
        term_sent_ = true;
        cmd_->interrupt();  // TERM, then KILL after the kill grace
      }
      return;
    case State::stopped:
      return;
  }
}

void CodeContext::send_execute() {
  run_->msg_id = random_uuid();
  run_->sent = true;
  run_->started_ms = unix_ms();
  run_->sent_at = uv_now(reg_.ctx.loop);
  // The kernel runs shell requests in order: the variables are set before
  // the code starts. Replies to the helper are not the run's (another
  // parent msg_id) and are ignored.
  if (run_->env) send_silent(run_->env->apply);
  channels_->send(KernelChannel::shell,
                  jp::make_request("execute_request", run_->msg_id, session_, jp::execute_request_content(run_->code)));
}

void CodeContext::send_silent(const std::string& code) {
  channels_->send(KernelChannel::shell, jp::make_request("execute_request", random_uuid(), session_,
                                                         jp::execute_request_content(code, true)));
}

bool CodeContext::on_iopub(std::string_view type, std::string_view content_text) {
  exec::RunSink& s = run_->sink;
  if (type == "stream") {
    if (content_text.size() > kStreamPieceBytes) return stream_in_pieces(content_text);
    auto sc = jp::read_stream_content(content_text);
    if (!sc) return true;
    s.output(sc->is_stderr ? exec::kStderr : exec::kStdout, reinterpret_cast<const uint8_t*>(sc->text.data()),
             sc->text.size());
    return true;
  }
  int64_t now = unix_ms();
  if (type == "display_data" || type == "update_display_data") {
    if (auto e = jp::result_event(content_text, now)) s.event(*e);
    return true;
  }
  auto c = jp::read_content(content_text);
  if (!c) return true;
  if (type == "status") {
    if (c->execution_state == "idle") {
      run_->idle_seen = true;
      if (!run_->reply_seen) run_->idle_at = uv_now(reg_.ctx.loop);
      maybe_finish_run();
    }
    return true;
  }
  if (type == "execute_input") {
    if (c->execution_count) run_->count = c->execution_count;
    if (!run_->executing) {
      run_->executing = true;
      if (run_->interrupt_pending) deliver_interrupt();
    }
    return true;
  }
  if (type == "execute_result") {
    if (c->execution_count) {
      run_->count = c->execution_count;
      s.event(jp::execution_count_event(*run_->count, now));
    }
    if (auto e = jp::result_event(content_text, now)) s.event(*e);
  } else if (type == "error") {
    run_->error_sent = true;
    s.event(jp::error_event_from(*c, now));
  }
  return true;
}

bool CodeContext::stream_in_pieces(std::string_view content) {
  if (big_content_ != content.data()) {
    auto st = jp::find_stream_text(content);
    if (!st) return true;
    big_content_ = content.data();
    big_text_ = st->escaped;
    big_stderr_ = st->is_stderr;
    big_pos_ = 0;
  }
  std::string piece;
  while (big_pos_ < big_text_.size()) {
    if (!run_ || run_->paused) return false;  // the log's write completions resume it
    piece.clear();
    if (!jp::unescape_json_string(big_text_, big_pos_, kStreamPieceBytes, piece)) {
      spdlog::warn("code context {}: a stream message with a bad escape; the rest of it is dropped", id_);
      break;
    }
    run_->sink.output(big_stderr_ ? exec::kStderr : exec::kStdout, reinterpret_cast<const uint8_t*>(piece.data()),
                      piece.size());
  }
  big_content_ = nullptr;
  return true;
}

void CodeContext::maybe_finish_run() {
  if (!run_ || !run_->reply_seen || !run_->idle_seen) return;
  std::string status = run_->reply.status.empty() ? "ok" : run_->reply.status;
  if (status == "error" && !run_->error_sent) run_->sink.event(jp::error_event_from(run_->reply, unix_ms()));
  finish_run(status);
}

void CodeContext::end_run_without_reply() {
  spdlog::warn("code context {}: the kernel went idle without an execute reply{}", id_,
               run_->interrupted ? " (interrupted as the code started)" : "");
  std::string why = run_->interrupted
                        ? "the interrupt reached the kernel before the code ran; it sent no execute reply"
                        : "the kernel went idle without an execute reply";
  run_->sink.event(jp::error_event(run_->interrupted ? "KeyboardInterrupt" : "NoExecuteReply", why, {why}, unix_ms()));
  finish_run("error");
}

void CodeContext::finish_run(const std::string& status) {
  CodeRun* run = run_.get();
  if (!run) return;
  run_.cut();
  // Put the environment back once the code is done (not queued behind it:
  // a failing run would have the kernel abort it). Before any next run's
  // request, which comes after this on the same channel.
  if (run->env && run->sent && channels_ && state_ == State::ready) send_silent(run->env->restore);
  big_content_ = nullptr;  // (its frames go with the channel's next message)
  protocol::ExecutionResult r;
  r.status = status;
  r.execution_count = run->count;
  r.execution_time_ms = run->sent ? unix_ms() - run->started_ms : 0;
  run->sink.finish(std::move(r));
}

void CodeContext::fail_start(const std::string& reason) {
  spdlog::warn("code context {}: {}", id_, reason);
  // POST /code/context answers 500 and leaves no context behind.
  bool drop = !ever_ready_ && !waiters_.empty() && !run_;
  fail_waiters(reason);
  if (drop) return reg_.remove(id_);
  if (run_) {
    run_->sink.event(jp::error_event("KernelStartFailed", reason, {reason}, unix_ms()));
    finish_run("start_failed");
  }
}

void CodeContext::fail_waiters(const std::string& reason) {
  auto waiters = std::move(waiters_);
  for (auto& w : waiters)
    if (http::Exchange* ex = w->exchange())
      ex->respond_error(500, codes::kRuntimeError, "error creating code context. " + reason);
}

void CodeContext::answer_input(std::string_view request_header) {
  // allow_stdin is false, so a kernel should never ask; one that does gets
  // an empty line and the client a note on stderr instead of a hang.
  if (!channels_) return;
  jp::WireMessage reply = jp::make_request("input_reply", random_uuid(), session_, "{\"value\":\"\"}");
  reply.parent_header = std::string(request_header);
  channels_->send(KernelChannel::stdin_, reply);
  if (run_) {
    static const char note[] = "execd: this kernel asked for input, which /code cannot give; it got an empty line\n";
    run_->sink.output(exec::kStderr, reinterpret_cast<const uint8_t*>(note), sizeof note - 1);
  }
}

std::string CodeContext::stderr_tail() const {
  std::string t = stderr_tail_.size() > kStderrTail ? stderr_tail_.substr(stderr_tail_.size() - kStderrTail)
                                                    : stderr_tail_;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

void CodeContext::remove_connection_file() {
  if (!conn_file_.empty()) unlink(conn_file_.c_str());
  conn_file_.clear();
  conn_.remove_sockets();
}

nlohmann::ordered_json CodeContext::describe(bool with_cwd) const {
  nlohmann::ordered_json j;
  j["id"] = id_;
  j["language"] = language_;
  if (with_cwd && !cwd_.empty()) j["cwd"] = cwd_;
  return j;
}
void CodeRun::set_paused(bool p) {
  paused = p;
  if (!p)
    if (CodeContext* c = context.get()) c->resume_output();
}

bool CodeRun::interrupt() {
  CodeContext* c = context.get();
  if (!c) return false;
  c->interrupt();
  return true;
}

CodeContext& CodeRegistryImpl::create(const std::string& language, const pty::KernelSpec& spec,
                                      const std::string& cwd) {
  std::string id = random_id32();
  auto c = std::make_unique<CodeContext>(*this, id, language, spec, cwd);
  CodeContext& ref = *c;
  contexts[id] = std::move(c);
  return ref;
}

void CodeRegistryImpl::remove(const std::string& id) {
  auto it = contexts.find(id);
  if (it == contexts.end()) return;
  for (auto d = defaults.begin(); d != defaults.end();)
    d = d->second == id ? defaults.erase(d) : std::next(d);
  std::unique_ptr<CodeContext> c = std::move(it->second);
  contexts.erase(it);
  CodeContext* raw = c.get();
  dying.push_back(std::move(c));
  raw->shut_down();
}

void CodeRegistryImpl::forget(CodeContext* c) {
  for (auto it = dying.begin(); it != dying.end(); ++it)
    if (it->get() == c) {
      it->release()->destroy();
      dying.erase(it);
      return;
    }
}

// ---------------------------------------------------------------------------

CodeRegistry::CodeRegistry(const Context& ctx, pty::Runtime& runtime, exec::LaunchPath& launches)
    : impl_(std::make_unique<CodeRegistryImpl>(ctx, runtime, launches)) {}

CodeRegistry::~CodeRegistry() = default;

void CodeRegistry::shutdown_all() {
  std::vector<std::string> ids;
  for (auto& [id, c] : impl_->contexts) ids.push_back(id);
  for (const auto& id : ids) impl_->remove(id);
}

void CodeRegistry::kill_all() {
  for (auto& c : impl_->dying) c->kill();
  for (auto& [id, c] : impl_->contexts) c->kill();
}

size_t CodeRegistry::kernels_alive() const {
  size_t n = 0;
  for (auto& c : impl_->dying) n += c->kernel_alive();
  for (auto& [id, c] : impl_->contexts) n += c->kernel_alive();
  return n;
}

void CodeRegistry::close() {
  for (auto& c : impl_->dying) c.release()->destroy();
  impl_->dying.clear();
  for (auto& [id, c] : impl_->contexts) c.release()->destroy();
  impl_->contexts.clear();
  impl_->defaults.clear();
}

}  // namespace execd::runners
