// execd/commands: the /command API. A CommandRecord is one execution, owned
// by the registry from spawn until its retention expires; it fans the
// process's output out to its retained log and to at most one live stream
// (the HTTP response that started it). The live stream may go away at any
// time; the command keeps running and its output stays readable.
#pragma once

#include <uv.h>

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "execd/context.h"
#include "execd/event_stream.h"
#include "execd/output_log.h"
#include "execd/server.h"
#include "protocol/envelope.h"
#include "protocol/http.h"
#include "protocol/router.h"
#include "pty/command.h"

namespace execd {

class CommandRegistry;

struct CommandRecord : pty::CommandSink, EventStream::Owner {
  CommandRecord(CommandRegistry& r) : registry(r) {}
  void on_output(pty::Stream s, const uint8_t* data, size_t len) override;
  void on_finished(const pty::Outcome& outcome) override;
  void on_stream_writable() override;
  void on_stream_closed() override;
  void update_pause();
  protocol::ExecutionResult result() const;
  std::string status_json() const;

  CommandRegistry& registry;
  std::string id, content;
  bool background = false;
  int64_t started_ns = 0, finished_ns = 0;
  pty::Command* cmd = nullptr;
  std::optional<pty::Outcome> outcome;
  std::string start_error;
  std::shared_ptr<OutputLog> log;
  EventStream* stream = nullptr;  // the live client, if still connected
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
  size_t size() const { return records_.size(); }
  // Shutdown: every running command's process group gets `sig`.
  void signal_all(int sig);
  void close();

 private:
  void sweep();
  Context& ctx_;
  std::map<std::string, std::unique_ptr<CommandRecord>> records_;
  std::deque<std::string> finished_order_;
  size_t running_ = 0;
  uv_timer_t sweep_timer_;
};

// Route handlers.
void handle_command_run(CommandRegistry& reg, Connection& conn, protocol::HttpRequest& req);
void handle_command_interrupt(CommandRegistry& reg, Connection& conn, const protocol::QueryParams& q);
void handle_command_status(CommandRegistry& reg, Connection& conn, const std::string& id);
void handle_command_logs(CommandRegistry& reg, Connection& conn, const std::string& id,
                         const protocol::QueryParams& q);

}  // namespace execd
