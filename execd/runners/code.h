// execd/runners/code: code contexts and their runs. A code context is one Jupyter kernel
// (started from an installed kernelspec, spoken to over ZMTP through
// execd/runners/kernel_channels) with its working directory; a run (CodeRun)
// is the runner of an execution of kind code_run in one. The routes (/code,
// E2B's /execute and /contexts) are execd/api/code's.
// Each run is an execution (execd/exec) whose runner speaks to the kernel,
// so both framings behave as /command does, and a run has an id (the
// EXECD-RUN-ID header), a status, retained output, resume, a record and a
// journal entry like any command. The registry owns every context and the
// default context per kernelspec.
//
// One execution per context at a time: a second one gets 409 CONTEXT_BUSY at
// once (a kernel runs requests serially anyway; a hidden queue would make a
// client's timeout count someone else's code and hide a stuck context).
#pragma once

#include <uv.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "execd/context.h"
#include "execd/exec/launch.h"
#include "execd/exec/registry.h"
#include "execd/http/awaiter.h"
#include "execd/limits.h"
#include "execd/link.h"
#include "execd/runners/kernel_channels.h"
#include "protocol/jupyter.h"
#include "pty/command.h"
#include "pty/kernel.h"
#include "pty/runtime.h"

namespace execd::runners {

namespace jp = protocol::jupyter;

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
  uint64_t sent_at = 0;      // loop ms the execute request went out
  // The kernel showed it took the request: a message of the run's on iopub
  // (a kernel publishes busy before it handles a request) or its reply.
  bool taken = false;
  uint64_t reply_at = 0, last_iopub_at = 0;  // loop ms of the reply and the run's last iopub message
  std::optional<int64_t> count;
  jp::KernelContent reply;  // of the execute_reply, once in
};

class CodeRegistryImpl {
 public:
  CodeRegistryImpl(const Context& c, pty::Runtime& rt, exec::LaunchPath& l);
  const Context& ctx;
  pty::Runtime& runtime;
  exec::Registry& executions;
  exec::LaunchPath& launches;
  const uint64_t heartbeat_timeout_ms;
  // How long a kernel that answers heartbeats may leave a request untaken.
  const uint64_t take_timeout_ms;
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

  void ensure_started();
  void wait_ready(http::Exchange& ex);
  void begin_run(CodeRun& run);
  void interrupt();
  void deliver_interrupt();

  // DELETE or daemon shutdown: the kernel is asked to exit, then signalled.
  void shut_down();
  void kill();

  // E2B's restart: a fresh kernel in the same context (state is lost);
  // `ex` is answered once it is ready. A run in progress ends with an error.
  void restart(http::Exchange& ex);

  // pty::FreezeListener: a frozen kernel answers no heartbeat and runs no
  // code; none of its deadlines counts that time.
  void on_freeze() override {}
  void on_thaw(uint64_t frozen_ms) override;

  // Frees the context once its timer has closed.
  void destroy();

  // pty::CommandSink: the kernel process's own stdout/stderr (not the code's
  // output, which comes over iopub) is kept for start-up failure messages.
  void on_output(pty::Stream, const uint8_t* data, size_t len) override;
  void on_finished(const pty::Outcome& o) override;

  // KernelChannelHandler
  void on_heartbeat() override { last_heartbeat_ = uv_now(reg_.ctx.loop); }

  void on_kernel_messages_dropped(KernelChannel ch, uint64_t count, uint64_t bytes) override;

  // Garbage from a kernel leaves nothing to trust on that channel: the
  // kernel is ended and the run reports why, as for any kernel that died.
  void on_channel_failed(KernelChannel ch, const std::string& why) override;
  bool on_kernel_message(KernelChannel ch, const jp::WireView& m) override;

  // The run's output went to the disk: a print held back can go on.
  void resume_output();

 private:
  void start();
  void send_kernel_info();

  // Ready = the shell answered and iopub delivered something: a kernel
  // publishes status for each kernel_info_request, so once iopub shows one,
  // the subscription is live and no output of the first execution is lost.
  void maybe_ready();

  static void on_timer(uv_timer_t* t) { static_cast<CodeContext*>(t->data)->tick(); }

  void tick();
  void send_execute();
  void send_silent(const std::string& code);

  // False: a large print is held back until its output has reached the
  // disk (the message comes again after resume_output()).
  bool on_iopub(std::string_view type, std::string_view content_text);

  // A print larger than a piece: its text is unescaped and handed on a
  // piece at a time, straight from the received frame; when the run's log is
  // behind the disk, the rest waits (the socket is not read meanwhile) so
  // that one message never holds more than a piece and the log's budget.
  bool stream_in_pieces(std::string_view content);
  void maybe_finish_run();

  // ipykernel catches a KeyboardInterrupt that lands in its request handler
  // before the code runs (a SIGINT right after execute_input), logs it, and
  // goes idle without an execute reply. Waiting for the reply would keep the
  // context busy for good, so the idle status ends the run.
  void end_run_without_reply();
  void finish_run(const std::string& status);
  void fail_start(const std::string& reason);
  void fail_waiters(const std::string& reason);
  void answer_input(std::string_view request_header);
  std::string stderr_tail() const;
  void remove_connection_file();

 public:
  nlohmann::ordered_json describe(bool with_cwd) const;

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

class CodeRegistry {
 public:
  CodeRegistry(const Context& ctx, pty::Runtime& runtime, exec::LaunchPath& launches);
  ~CodeRegistry();
  CodeRegistry(const CodeRegistry&) = delete;
  CodeRegistry& operator=(const CodeRegistry&) = delete;

  // Daemon shutdown: shutdown_request to every kernel (signals follow after
  // a grace period), then kill_all() when the daemon stops waiting.
  void shutdown_all();
  void kill_all();
  // Kernel processes not yet reaped.
  size_t kernels_alive() const;
  // Last step: lets go of every kernel, socket and handle.
  void close();

  CodeRegistryImpl* impl() { return impl_.get(); }

 private:
  std::unique_ptr<CodeRegistryImpl> impl_;
};

}  // namespace execd::runners
