// execd/api/commands: the /command API. A CommandRecord is one execution,
// owned by the registry from spawn until its retention expires (and its
// retained log is idle). It fans the process's output out to its retained
// log and to at most one live stream, linked to it: the stream may go at any
// time, the command keeps running and its output stays readable.
#pragma once

#include <uv.h>

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "execd/api/execution_stream.h"
#include "execd/api/output_log.h"
#include "execd/context.h"
#include "protocol/envelope.h"
#include "pty/command.h"

namespace execd::api {

class CommandRegistry;

class CommandRecord final : public pty::CommandSink, public ExecutionProducer {
 public:
  explicit CommandRecord(CommandRegistry& r) : registry(r) {}
  ~CommandRecord() override;

  // pty::CommandSink
  void on_output(pty::Stream s, const uint8_t* data, size_t len) override;
  void on_finished(const pty::Outcome& outcome) override;
  // ExecutionProducer
  void set_client_paused(bool paused) override;
  void client_gone() override;

  void update_pause();
  protocol::ExecutionResult result() const;
  std::string status_json() const;

  CommandRegistry& registry;
  std::string id, content;
  bool background = false;
  int64_t started_ns = 0, finished_ns = 0;
  pty::Command* cmd = nullptr;  // released when the command finishes
  std::optional<pty::Outcome> outcome;
  std::string start_error;
  std::unique_ptr<OutputLog> log;
  bool client_paused = false;
};

class CommandRegistry {
 public:
  explicit CommandRegistry(Context& ctx);
  ~CommandRegistry();
  Context& ctx() { return ctx_; }

  CommandRecord* create(std::string content, bool background);
  CommandRecord* find(const std::string& id);
  void finished(CommandRecord* r);
  size_t running() const { return running_; }
  // Shutdown: every running command's process group gets `sig`.
  void signal_all(int sig);
  // Stops the retention timer and releases every command (daemon exit).
  void close();

 private:
  void sweep();
  static void on_sweep(uv_timer_t* t) { static_cast<CommandRegistry*>(t->data)->sweep(); }
  Context& ctx_;
  uint64_t sweep_period_ = 1000;
  std::map<std::string, std::unique_ptr<CommandRecord>> records_;
  std::deque<std::string> finished_order_;
  size_t running_ = 0;
  uv_timer_t sweep_timer_;
};

}  // namespace execd::api
