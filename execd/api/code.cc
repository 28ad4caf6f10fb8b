// execd/api/code: see header.
#include "execd/api/code.h"

#include <sys/stat.h>

#include <optional>
#include <vector>

#include "execd/api/activity.h"
#include "execd/api/api.h"
#include "execd/api/commands.h"
#include "execd/exec/formats.h"
#include "execd/exec/reader.h"
#include "execd/http/awaiter.h"
#include "execd/limits.h"
#include "protocol/e2b_code.h"
#include "protocol/errors.h"
#include "protocol/json_text.h"
#include "protocol/jupyter.h"

namespace execd::api {

namespace codes = protocol::codes;
namespace jp = protocol::jupyter;
using json = nlohmann::json;
using runners::CodeContext;
using runners::CodeRegistry;
using runners::CodeRegistryImpl;
using runners::CodeRun;
using runners::ReadyWaiter;

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

void add_code_routes(RouteTable& routes, CodeRegistry& code, CommandService& commands, sessions::SessionRegistry& sessions) {
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
