// execd/api/code: see header.
#include "execd/api/code.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "execd/api/activity.h"
#include "execd/api/api.h"
#include "execd/http/awaiter.h"
#include "execd/api/commands.h"
#include "execd/clock.h"
#include "execd/ids.h"
#include "execd/limits.h"
#include "execd/exec/formats.h"
#include "execd/exec/reader.h"
#include "protocol/e2b_code.h"
#include "protocol/errors.h"
#include "protocol/json_text.h"
#include "protocol/jupyter.h"

#include "execd/kernel_channels.h"
#include "pty/command.h"
#include "pty/kernel.h"

namespace execd::api {

namespace codes = protocol::codes;
namespace jp = protocol::jupyter;
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
constexpr size_t kStderrTail = 2048;
// Stream messages above this are handed on in pieces of this size.
constexpr size_t kStreamPieceBytes = 1 << 20;

// Overridable for tests of a silent kernel; 5 s otherwise.
uint64_t heartbeat_timeout_from(const std::vector<std::string>& env) {
  const char* v = env_lookup(env, "EXECD_KERNEL_HEARTBEAT_TIMEOUT_MS");
  long n = v ? atol(v) : 0;
  return n > 0 ? static_cast<uint64_t>(n) : uint64_t{5000};
}

std::string describe_exit(const pty::Outcome& o) {
  if (o.exit_code) return "exit status " + std::to_string(*o.exit_code);
  if (o.signal) return std::string("signal ") + pty::signal_name(o.signal) + " (" + pty::signal_description(o.signal) + ")";
  return "exited";
}

}  // namespace

class CodeContext;

// An exchange waiting for POST /code/context's kernel to be ready.
struct ReadyWaiter : http::Awaitable {};

// One run of code in a context: the runner of a /code execution. Kernel
// output is not pausable (iopub is PUB/SUB: the kernel drops what its queue
// cannot hold once execd stops reading); a client that falls behind catches
// up from the execution's retained log instead (--code-spill-limit bytes of it).
class CodeRun final : public exec::Runner {
 public:
  CodeRun(exec::RunSink& s, std::string c) : sink(s), code(std::move(c)) {}
  bool pausable() const override { return false; }
  bool interrupt() override;
  // Nobody reads the rest: stop the code so the context is free again.
  void unwatched() override { interrupt(); }
  // The context cuts the link when the run ends (finish_run).
  bool holds_nothing() const override { return !context; }
  // The output cannot pause, but a large print can wait for the disk.
  void set_paused(bool p) override;
  bool paused = false;

  exec::RunSink& sink;
  Link<CodeContext> context;
  std::string code;
  std::optional<jp::EnvScript> env;  // E2B's env_vars: applied before the code, restored after
  std::string msg_id;
  int64_t started_ms = 0;
  bool sent = false, reply_seen = false, idle_seen = false, error_sent = false;
  // The kernel published execute_input: the code is running. A kernel ignores
  // SIGINT while idle, so an interrupt that comes earlier waits for this.
  bool executing = false, interrupt_pending = false;
  uint64_t last_sigint = 0;  // loop ms of the last SIGINT for this run, 0 = none
  bool interrupted = false;  // an interrupt reached the kernel during this run
  uint64_t idle_at = 0;      // loop ms of the run's idle status while no reply was in
  std::optional<int64_t> count;
  jp::KernelContent reply;  // of the execute_reply, once in
};

class CodeRegistryImpl {
 public:
  CodeRegistryImpl(const Context& c, pty::Runtime& rt, exec::LaunchPath& l)
      : ctx(c), runtime(rt), executions(l.executions()), launches(l),
        heartbeat_timeout_ms(heartbeat_timeout_from(c.base_env)) {}
  const Context& ctx;
  pty::Runtime& runtime;
  exec::Registry& executions;
  exec::LaunchPath& launches;
  const uint64_t heartbeat_timeout_ms;
  std::map<std::string, std::unique_ptr<CodeContext>> contexts;
  std::map<std::string, std::string> defaults;  // kernel name -> context id
  std::vector<std::unique_ptr<CodeContext>> dying;
  std::vector<pty::KernelSpec> specs;
  bool specs_loaded = false;

  const pty::KernelSpec* spec_for(const std::string& language) {
    if (!specs_loaded || !pty::pick_kernelspec(specs, language)) {
      specs = pty::find_kernelspecs(ctx.base_env);
      specs_loaded = true;
    }
    return pty::pick_kernelspec(specs, language);
  }
  std::string installed() const {
    std::string s;
    for (const auto& k : specs) s += (s.empty() ? "" : ", ") + k.name;
    return s.empty() ? "none" : s;
  }
  // A kernel holds its process (a pidfd and its output pipes) and five
  // sockets; kept as before, with room to spare.
  static constexpr size_t kKernelDescriptors = 24;
  // Why one more context would not fit (E2B's routes word it their way).
  std::optional<Refusal> context_refusal() const {
    if (auto r = refuse_past(contexts.size() + dying.size(), ctx.config.max_code_contexts, "code contexts",
                             "max-code-contexts"))
      return r;
    return refuse_descriptors(kKernelDescriptors, "a code context");
  }
  bool admit_context(http::Exchange& ex) {
    auto r = context_refusal();
    if (r) ex.respond_error(r->status, r->code, r->message);
    return !r;
  }
  CodeContext* find(const std::string& id) {
    auto it = contexts.find(id);
    return it == contexts.end() ? nullptr : it->second.get();
  }
  CodeContext& create(const std::string& language, const pty::KernelSpec& spec, const std::string& cwd);
  // Takes a context out of the listing and shuts its kernel down.
  void remove(const std::string& id);
  // The kernel of a removed context is gone: free it.
  void forget(CodeContext* c);
};

class CodeContext final : public pty::CommandSink, public KernelChannelHandler, public pty::FreezeListener {
 public:
  enum class State { stopped, starting, ready, stopping };

  CodeContext(CodeRegistryImpl& reg, std::string id, std::string language, pty::KernelSpec spec, std::string cwd)
      : reg_(reg), id_(std::move(id)), language_(std::move(language)), spec_(std::move(spec)), cwd_(std::move(cwd)) {
    uv_timer_init(reg_.ctx.loop, &timer_);
    timer_.data = this;
    reg_.runtime.containment.add_freeze_listener(this);
  }

  const std::string& id() const { return id_; }
  const std::string& language() const { return language_; }
  const std::string& kernel_name() const { return spec_.name; }
  const std::string& cwd() const { return cwd_; }
  bool busy() const { return static_cast<bool>(run_); }
  bool kernel_alive() const { return cmd_ != nullptr; }
  State state() const { return state_; }

  void ensure_started() {
    if (state_ == State::stopped) start();
  }

  void wait_ready(http::Exchange& ex) {
    auto w = std::make_unique<ReadyWaiter>();
    http::await(ex, *w);
    waiters_.push_back(std::move(w));
  }

  void begin_run(CodeRun& run) {
    link(*this, run_, run, run.context);
    if (state_ == State::ready) send_execute();
    else ensure_started();
  }

  void interrupt() {
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

  void deliver_interrupt() {
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

  // DELETE or daemon shutdown: the kernel is asked to exit, then signalled.
  void shut_down() {
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

  void kill() {
    if (cmd_) cmd_->signal_group(SIGKILL);
  }

  // E2B's restart: a fresh kernel in the same context (state is lost);
  // `ex` is answered once it is ready. A run in progress ends with an error.
  void restart(http::Exchange& ex) {
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

  // pty::FreezeListener: a frozen kernel answers no heartbeat and runs no
  // code; none of its deadlines counts that time.
  void on_freeze() override {}
  void on_thaw(uint64_t frozen_ms) override {
    uint64_t now = uv_now(reg_.ctx.loop);
    last_heartbeat_ = now;
    started_ += frozen_ms;
    if (run_) {
      if (run_->idle_at) run_->idle_at += frozen_ms;
      if (run_->last_sigint) run_->last_sigint += frozen_ms;
    }
  }

  // Frees the context once its timer has closed.
  void destroy() {
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

  // pty::CommandSink: the kernel process's own stdout/stderr (not the code's
  // output, which comes over iopub) is kept for start-up failure messages.
  void on_output(pty::Stream, const uint8_t* data, size_t len) override {
    stderr_tail_.append(reinterpret_cast<const char*>(data), len);
    if (stderr_tail_.size() > 2 * kStderrTail) stderr_tail_.erase(0, stderr_tail_.size() - kStderrTail);
  }

  void on_finished(const pty::Outcome& o) override {
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

  // KernelChannelHandler
  void on_heartbeat() override { last_heartbeat_ = uv_now(reg_.ctx.loop); }

  void on_kernel_messages_dropped(KernelChannel ch, uint64_t count, uint64_t bytes) override {
    if (!run_ || ch != KernelChannel::iopub) return;
    std::string note = "execd: the kernel sent " + std::to_string(count) + " message(s) larger than " +
                       "--max-kernel-message (" + std::to_string(reg_.ctx.config.max_kernel_message_bytes) +
                       " bytes), " + std::to_string(bytes) + " bytes in all; skipped\n";
    run_->sink.output(exec::kStderr, reinterpret_cast<const uint8_t*>(note.data()), note.size());
  }

  // Garbage from a kernel leaves nothing to trust on that channel: the
  // kernel is ended and the run reports why, as for any kernel that died.
  void on_channel_failed(KernelChannel ch, const std::string& why) override {
    if (death_reason_.empty())
      death_reason_ = std::string("the kernel broke the wire protocol on its ") + channel_name(ch) + " channel: " + why;
    kill();
  }

  bool on_kernel_message(KernelChannel ch, const jp::WireView& m) override {
    auto env = jp::read_envelope(m);
    if (!env) return true;
    switch (ch) {
      case KernelChannel::shell:
        if (env->msg_type == "kernel_info_reply") {
          shell_ready_ = true;
          maybe_ready();
        } else if (env->msg_type == "execute_reply" && run_ && run_->sent && env->parent_msg_id == run_->msg_id) {
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
        if (run_ && run_->sent && env->parent_msg_id == run_->msg_id) return on_iopub(env->msg_type, m.content);
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

  // The run's output went to the disk: a print held back can go on.
  void resume_output() {
    if (channels_) channels_->resume(KernelChannel::iopub);
  }

 private:
  void start() {
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

  void send_kernel_info() {
    last_info_sent_ = uv_now(reg_.ctx.loop);
    channels_->send(KernelChannel::shell, jp::make_request("kernel_info_request", random_uuid(), session_, "{}"));
  }

  // Ready = the shell answered and iopub delivered something: a kernel
  // publishes status for each kernel_info_request, so once iopub shows one,
  // the subscription is live and no output of the first execution is lost.
  void maybe_ready() {
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

  static void on_timer(uv_timer_t* t) { static_cast<CodeContext*>(t->data)->tick(); }

  void tick() {
    if (reg_.runtime.containment.frozen()) return;
    uint64_t now = uv_now(reg_.ctx.loop);
    // Time the loop itself was held up (a large kernel message verified in
    // one go, a loaded machine) does not count against the kernel: its
    // heartbeat reply may be sitting unread in the socket meanwhile.
    if (last_tick_ && now - last_tick_ > 2 * kTickMs)
      last_heartbeat_ = std::min(now, last_heartbeat_ + (now - last_tick_ - kTickMs));
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
        // A SIGINT that lands in the kernel between requests is ignored
        // there; while the interrupted run goes on, say it again.
        // Never once the reply is in: the kernel is between requests then,
        // and a SIGINT landing as ipykernel leaves its handler can break its
        // shell loop while the heartbeat thread keeps answering.
        if (run_ && run_->last_sigint && !run_->reply_seen && now - run_->last_sigint >= kSigintRepeatMs)
          deliver_interrupt();
        if (run_ && run_->idle_seen && !run_->reply_seen && now - run_->idle_at >= kReplyAfterIdleMs)
          end_run_without_reply();
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

  void send_execute() {
    run_->msg_id = random_uuid();
    run_->sent = true;
    run_->started_ms = unix_ms();
    // The kernel runs shell requests in order: the variables are set before
    // the code starts. Replies to the helper are not the run's (another
    // parent msg_id) and are ignored.
    if (run_->env) send_silent(run_->env->apply);
    channels_->send(KernelChannel::shell,
                    jp::make_request("execute_request", run_->msg_id, session_, jp::execute_request_content(run_->code)));
  }

  void send_silent(const std::string& code) {
    channels_->send(KernelChannel::shell, jp::make_request("execute_request", random_uuid(), session_,
                                                           jp::execute_request_content(code, true)));
  }

  // False: a large print is held back until its output has reached the
  // disk (the message comes again after resume_output()).
  bool on_iopub(std::string_view type, std::string_view content_text) {
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

  // A print larger than a piece: its text is unescaped and handed on a
  // piece at a time, straight from the received frame; when the run's log is
  // behind the disk, the rest waits (the socket is not read meanwhile) so
  // that one message never holds more than a piece and the log's budget.
  bool stream_in_pieces(std::string_view content) {
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

  void maybe_finish_run() {
    if (!run_ || !run_->reply_seen || !run_->idle_seen) return;
    std::string status = run_->reply.status.empty() ? "ok" : run_->reply.status;
    if (status == "error" && !run_->error_sent) run_->sink.event(jp::error_event_from(run_->reply, unix_ms()));
    finish_run(status);
  }

  // ipykernel catches a KeyboardInterrupt that lands in its request handler
  // before the code runs (a SIGINT right after execute_input), logs it, and
  // goes idle without an execute reply. Waiting for the reply would keep the
  // context busy for good, so the idle status ends the run.
  void end_run_without_reply() {
    spdlog::warn("code context {}: the kernel went idle without an execute reply{}", id_,
                 run_->interrupted ? " (interrupted as the code started)" : "");
    std::string why = run_->interrupted
                          ? "the interrupt reached the kernel before the code ran; it sent no execute reply"
                          : "the kernel went idle without an execute reply";
    run_->sink.event(jp::error_event(run_->interrupted ? "KeyboardInterrupt" : "NoExecuteReply", why, {why}, unix_ms()));
    finish_run("error");
  }

  void finish_run(const std::string& status) {
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

  void fail_start(const std::string& reason) {
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

  void fail_waiters(const std::string& reason) {
    auto waiters = std::move(waiters_);
    for (auto& w : waiters)
      if (http::Exchange* ex = w->exchange())
        ex->respond_error(500, codes::kRuntimeError, "error creating code context. " + reason);
  }

  void answer_input(std::string_view request_header) {
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

  std::string stderr_tail() const {
    std::string t = stderr_tail_.size() > kStderrTail ? stderr_tail_.substr(stderr_tail_.size() - kStderrTail)
                                                      : stderr_tail_;
    while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
    return t;
  }

  void remove_connection_file() {
    if (!conn_file_.empty()) unlink(conn_file_.c_str());
    conn_file_.clear();
    conn_.remove_sockets();
  }

 public:
  nlohmann::ordered_json describe(bool with_cwd) const {
    nlohmann::ordered_json j;
    j["id"] = id_;
    j["language"] = language_;
    if (with_cwd && !cwd_.empty()) j["cwd"] = cwd_;
    return j;
  }

 private:
  CodeRegistryImpl& reg_;
  std::string id_, language_;
  pty::KernelSpec spec_;
  pty::KernelConnection conn_;
  std::string cwd_;
  State state_ = State::stopped;
  bool restart_pending_ = false;
  pty::Command* cmd_ = nullptr;
  KernelChannels* channels_ = nullptr;
  std::string session_, conn_file_, stderr_tail_, death_reason_;
  uv_timer_t timer_;
  uint64_t started_ = 0, last_info_sent_ = 0, last_heartbeat_ = 0, last_ping_ = 0, stop_started_ = 0;
  uint64_t last_tick_ = 0;
  bool shell_ready_ = false, iopub_seen_ = false, term_sent_ = false, ever_ready_ = false;
  Link<CodeRun> run_;
  std::vector<std::unique_ptr<ReadyWaiter>> waiters_;
  // A large print being handed on in pieces (see stream_in_pieces).
  const char* big_content_ = nullptr;
  std::string_view big_text_;
  size_t big_pos_ = 0;
  bool big_stderr_ = false;
};

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

// ---------------------------------------------------------------------------
// Routes

namespace {

void context_not_found(http::Exchange& ex, const std::string& id) {
  ex.respond_error(404, codes::kContextNotFound, "context " + id + " not found");
}

// The context's directory: created if missing, as the Go daemon does.
bool prepare_cwd(const std::string& cwd, std::string& error) {
  if (cwd.empty()) return true;
  struct stat st;
  if (stat(cwd.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return true;
    error = "cwd is not a directory: " + cwd;
    return false;
  }
  for (size_t pos = 1; pos <= cwd.size(); ++pos) {
    if (pos != cwd.size() && cwd[pos] != '/') continue;
    std::string part = cwd.substr(0, pos);
    if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      error = "cannot create cwd " + cwd + ": " + strerror(errno);
      return false;
    }
  }
  return true;
}

void handle_create(CodeRegistryImpl& reg, http::Exchange& ex) {
  auto decoded = jp::decode_create_context(ex.request().body);
  if (auto* err = std::get_if<jp::RequestError>(&decoded))
    return ex.respond_error(400, codes::kInvalidRequestBody,
                            "error parsing request, MAYBE invalid body format. " + err->message);
  auto& req = std::get<jp::CreateContextRequest>(decoded);
  if (!reg.executions.accepting()) return ex.respond_error(503, codes::kRuntimeError, "execd is shutting down");
  if (req.language.empty()) req.language = "python";
  const pty::KernelSpec* spec = reg.spec_for(req.language);
  if (!spec)
    return ex.respond_error(400, codes::kInvalidRequestBody,
                            "error creating code context. no kernelspec for language '" + req.language +
                                "' (installed: " + reg.installed() + ")");
  if (!reg.admit_context(ex)) return;
  std::string error;
  if (!prepare_cwd(req.cwd, error))
    return ex.respond_error(400, codes::kInvalidRequestBody, "error creating code context. " + error);
  CodeContext& c = reg.create(req.language, *spec, req.cwd);
  c.wait_ready(ex);
  c.ensure_started();
}

// The default context of a language (made on first use), or null with
// `error` set.
CodeContext* default_context(CodeRegistryImpl& reg, const std::string& language, int& status, std::string& error) {
  const pty::KernelSpec* spec = reg.spec_for(language);
  if (!spec) {
    status = 400;
    error = "no kernelspec for language '" + language + "' (installed: " + reg.installed() + ")";
    return nullptr;
  }
  auto d = reg.defaults.find(spec->name);
  CodeContext* c = d == reg.defaults.end() ? nullptr : reg.find(d->second);
  if (c) return c;
  if (auto r = reg.context_refusal()) {
    status = r->status;
    error = r->message;
    return nullptr;
  }
  c = &reg.create(language, *spec, "");
  reg.defaults[spec->name] = c->id();
  return c;
}

void e2b_text(http::Exchange& ex, int status, const std::string& text);

// What a code run brings to a launch (exec/launch): its context, there and
// idle when asked and again when it starts, and its stream (`format`; null:
// the OpenSandbox envelope in the client's framing). E2B's /execute words
// its refusals as text.
class CodeRunStart final : public exec::RunStart {
 public:
  CodeRunStart(CodeRegistryImpl& reg, std::string context, std::string code, std::unique_ptr<exec::StreamFormat> format,
               std::optional<jp::EnvScript> env, bool e2b)
      : reg_(reg), context_(std::move(context)), code_(std::move(code)), format_(std::move(format)),
        env_(std::move(env)), e2b_(e2b) {}
  std::optional<protocol::ApiError> admission() override { return refusal(); }
  std::optional<protocol::ApiError> recheck() override { return refusal(); }
  std::unique_ptr<exec::StreamFormat> stream_format(http::Exchange& client) override {
    return format_ ? std::move(format_) : exec::envelope_format(framing_for(reg_.ctx, client), false);
  }
  std::unique_ptr<exec::Runner> start(exec::Execution& e, std::string&) override {
    auto run = std::make_unique<CodeRun>(e, std::move(code_));
    run->env = std::move(env_);
    reg_.find(context_)->begin_run(*run);
    return run;
  }
  void refuse(http::Exchange& client, const protocol::ApiError& why) override {
    if (e2b_) return e2b_text(client, why.status, why.message);
    exec::RunStart::refuse(client, why);
  }

 private:
  std::optional<protocol::ApiError> refusal() {
    CodeContext* c = reg_.find(context_);
    if (!c) return protocol::ApiError{404, std::string(codes::kContextNotFound), "context " + context_ + " not found"};
    if (c->busy()) return protocol::ApiError{409, "CONTEXT_BUSY", "context " + c->id() + " is already running code"};
    return std::nullopt;
  }

  CodeRegistryImpl& reg_;
  std::string context_, code_;
  std::unique_ptr<exec::StreamFormat> format_;
  std::optional<jp::EnvScript> env_;
  bool e2b_;
};

// Starts a run of `code` in context `c` (see CodeRunStart).
void start_code_run(CodeRegistryImpl& reg, http::Exchange& ex, CodeContext& c, std::string code,
                    std::vector<std::string> track, std::unique_ptr<exec::StreamFormat> format = nullptr,
                    std::optional<jp::EnvScript> env = std::nullopt) {
  exec::ExecutionSpec spec;
  spec.kind = exec::Kind::code_run;
  spec.content = code;
  spec.owner = c.id();
  spec.language = c.language();
  spec.fingerprint = "code-run";
  spec.cwd = c.cwd();
  spec.track_changes = std::move(track);
  bool e2b = format != nullptr;
  reg.launches.launch(&ex, std::move(spec),
                      std::make_unique<CodeRunStart>(reg, c.id(), std::move(code), std::move(format), std::move(env), e2b),
                      false, static_cast<uint64_t>(reg.ctx.config.code_spill_limit_bytes));
}

void handle_run(CodeRegistryImpl& reg, CommandService& commands, http::Exchange& ex) {
  auto decoded = jp::decode_run_code(ex.request().body);
  if (auto* err = std::get_if<jp::RequestError>(&decoded))
    return ex.respond_error(400, codes::kInvalidRequestBody,
                            "invalid request, validation error " + err->message);
  auto& req = std::get<jp::RunCodeRequest>(decoded);
  if (!reg.executions.accepting()) return ex.respond_error(503, codes::kRuntimeError, "execd is shutting down");
  CodeContext* c = nullptr;
  if (!req.context_id.empty()) {
    c = reg.find(req.context_id);
    if (!c) return context_not_found(ex, req.context_id);
  } else {
    if (req.language.empty()) req.language = "python";
    int status = 0;
    std::string error;
    c = default_context(reg, req.language, status, error);
    if (!c)
      return ex.respond_error(status, status == 429   ? "LIMIT_REACHED"
                                      : status == 503 ? "OUT_OF_DESCRIPTORS"
                                                      : codes::kInvalidRequestBody,
                              error);
  }
  start_code_run(reg, ex, *c, std::move(req.code), std::move(req.track_changes));
}

// ---------------------------------------------------------------------------
// E2B's code-interpreter API (e2b-code-interpreter): /execute, /contexts.

namespace e2b = protocol::e2b_code;

std::string home_dir(const Context& ctx) {
  const char* home = env_lookup(ctx.base_env, "HOME");
  return home && *home ? home : "/";
}

void e2b_text(http::Exchange& ex, int status, const std::string& text) {
  ex.respond(status, "text/plain; charset=utf-8", text);
}

void handle_e2b_execute(CodeRegistryImpl& reg, CommandService& commands, http::Exchange& ex) {
  auto decoded = e2b::decode_execute(ex.request().body);
  if (auto* err = std::get_if<protocol::DecodeError>(&decoded)) return e2b_text(ex, 422, err->message);
  auto& req = std::get<e2b::ExecuteRequest>(decoded);
  if (req.context_id && req.language) return e2b_text(ex, 400, "Only one of context_id or language can be provided");
  if (!reg.executions.accepting()) return e2b_text(ex, 503, "execd is shutting down");
  CodeContext* c = nullptr;
  if (req.context_id) {
    c = reg.find(*req.context_id);
    if (!c) return e2b_text(ex, 404, "Context " + *req.context_id + " not found");
  } else {
    int status = 0;
    std::string error;
    c = default_context(reg, e2b::normalize_language(req.language.value_or("")), status, error);
    if (!c) return e2b_text(ex, status == 400 ? 500 : status, error);
  }
  if (c->busy()) return e2b_text(ex, 409, "context " + c->id() + " is already running code");
  std::optional<jp::EnvScript> env;
  if (!req.env_vars.empty()) {
    // Refused rather than ignored where execd cannot set them: code that
    // reads the variables would otherwise run in the wrong environment.
    if (c->language() != "python")
      return e2b_text(ex, 501,
                      "env_vars (run_code's envs) is supported in python contexts only, not " + c->language() +
                          ": set them in the code");
    env = jp::python_env_script(req.env_vars);
  }
  start_code_run(reg, ex, *c, std::move(req.code), {}, exec::e2b_code_format(), std::move(env));
}

void handle_e2b_create(CodeRegistryImpl& reg, http::Exchange& ex) {
  auto decoded = e2b::decode_create_context(ex.request().body);
  if (auto* err = std::get_if<protocol::DecodeError>(&decoded)) return e2b_text(ex, 422, err->message);
  auto& req = std::get<e2b::CreateContextRequest>(decoded);
  if (!reg.executions.accepting()) return e2b_text(ex, 503, "execd is shutting down");
  std::string language = e2b::normalize_language(req.language.value_or(""));
  const pty::KernelSpec* spec = reg.spec_for(language);
  if (!spec)
    return e2b_text(ex, 500, "no kernelspec for language '" + language + "' (installed: " + reg.installed() + ")");
  if (auto r = reg.context_refusal()) return e2b_text(ex, r->status, r->message);
  std::string cwd = req.cwd && !req.cwd->empty() ? *req.cwd : home_dir(reg.ctx);
  std::string error;
  if (!prepare_cwd(cwd, error)) return e2b_text(ex, 500, error);
  CodeContext& c = reg.create(language, *spec, cwd);
  c.wait_ready(ex);
  c.ensure_started();
}

void handle_e2b_list(CodeRegistryImpl& reg, http::Exchange& ex) {
  std::string out = "[";
  for (auto& [id, c] : reg.contexts) {
    if (out.size() > 1) out += ',';
    out += e2b::context_json(c->id(), c->language(), c->cwd().empty() ? home_dir(reg.ctx) : c->cwd());
  }
  out += ']';
  ex.respond_json(200, out);
}

void handle_list(CodeRegistryImpl& reg, http::Exchange& ex) {
  const std::string* lang = protocol::query_value(ex.query, "language");
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (auto& [id, c] : reg.contexts)
    if (!lang || lang->empty() || c->language() == *lang || c->kernel_name() == *lang)
      out.push_back(c->describe(false));
  ex.respond_json(200, out.dump(-1, ' ', false, json::error_handler_t::replace));
}

void handle_delete_language(CodeRegistryImpl& reg, http::Exchange& ex) {
  const std::string* lang = protocol::query_value(ex.query, "language");
  if (!lang || lang->empty()) return ex.respond_error(400, codes::kMissingQuery, "missing query parameter 'language'");
  std::vector<std::string> ids;
  for (auto& [id, c] : reg.contexts)
    if (c->language() == *lang || c->kernel_name() == *lang) ids.push_back(id);
  for (const auto& id : ids) reg.remove(id);
  ex.respond_empty(200);
}

}  // namespace

void add_code_routes(RouteTable& routes, CodeRegistry& code, CommandService& commands, SessionRegistry& sessions) {
  CodeRegistryImpl& reg = *code.impl();
  routes.add("POST", "/code", [&reg, &commands](http::Exchange& ex) { handle_run(reg, commands, ex); }, kStartsProcesses);
  routes.add("DELETE", "/code", [&reg, &commands, &sessions](http::Exchange& ex) {
    const std::string* id = protocol::query_value(ex.query, "id");
    CodeContext* c = id ? reg.find(*id) : nullptr;
    if (!c) return interrupt_command(commands, sessions, ex);
    c->interrupt();
    ex.respond_empty(200);
  });
  routes.add("POST", "/code/context", [&reg](http::Exchange& ex) { handle_create(reg, ex); }, kStartsProcesses);
  routes.add("GET", "/code/contexts", [&reg](http::Exchange& ex) { handle_list(reg, ex); });
  routes.add("DELETE", "/code/contexts", [&reg](http::Exchange& ex) { handle_delete_language(reg, ex); });
  routes.add("GET", "/code/contexts/:id", [&reg](http::Exchange& ex) {
    const std::string& id = ex.params.get("id");
    CodeContext* c = reg.find(id);
    if (!c) return context_not_found(ex, id);
    ex.respond_json(200, c->describe(false).dump(-1, ' ', false, json::error_handler_t::replace));
  });
  routes.add("DELETE", "/code/contexts/:id", [&reg](http::Exchange& ex) {
    const std::string& id = ex.params.get("id");
    if (!reg.find(id)) return context_not_found(ex, id);
    reg.remove(id);
    ex.respond_empty(200);
  });
}

void add_e2b_code_routes(RouteTable& routes, CodeRegistry& code, CommandService& commands) {
  CodeRegistryImpl& reg = *code.impl();
  routes.add(
      "POST", "/execute", [&reg, &commands](http::Exchange& ex) { handle_e2b_execute(reg, commands, ex); },
      kStartsProcesses);
  routes.add("POST", "/contexts", [&reg](http::Exchange& ex) { handle_e2b_create(reg, ex); }, kStartsProcesses);
  routes.add("GET", "/contexts", [&reg](http::Exchange& ex) { handle_e2b_list(reg, ex); });
  routes.add("DELETE", "/contexts/:id", [&reg](http::Exchange& ex) {
    const std::string& id = ex.params.get("id");
    if (!reg.find(id)) return e2b_text(ex, 404, "Context " + id + " not found");
    reg.remove(id);
    ex.respond_empty(204);
  });
  routes.add("POST", "/contexts/:id/restart", [&reg](http::Exchange& ex) {
    const std::string& id = ex.params.get("id");
    CodeContext* c = reg.find(id);
    if (!c) return e2b_text(ex, 404, "Context " + id + " not found");
    c->restart(ex);
  }, kStartsProcesses);
}

}  // namespace execd::api
