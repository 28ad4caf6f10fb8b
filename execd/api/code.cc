// execd/api/code: see header.
#include "execd/api/code.h"

#include <optional>
#include <vector>

#include "execd/api/pause.h"
#include "execd/api/api.h"
#include "execd/api/commands.h"
#include "execd/exec/formats.h"
#include "execd/exec/reader.h"
#include "execd/http/awaiter.h"
#include "execd/limits.h"
#include "execd/runners/code_launch.h"
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
  if (!runners::prepare_cwd(req.cwd, error))
    return ex.respond_error(400, codes::kInvalidRequestBody, "error creating code context. " + error);
  CodeContext& c = reg.create(req.language, *spec, req.cwd);
  c.wait_ready(ex);
  c.ensure_started();
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
    c = runners::default_context(reg, req.language, status, error);
    if (!c)
      return ex.respond_error(status, status == 429   ? "LIMIT_REACHED"
                                      : status == 503 ? "OUT_OF_DESCRIPTORS"
                                                      : codes::kInvalidRequestBody,
                              error);
  }
  runners::start_code_run(reg, ex, *c, std::move(req.code), std::move(req.track_changes), framing_for(reg.ctx, ex));
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
    c = runners::default_context(reg, e2b::normalize_language(req.language.value_or("")), status, error);
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
  runners::start_code_run(reg, ex, *c, std::move(req.code), {}, protocol::Framing::exact, exec::e2b_code_format(),
                          std::move(env), [](http::Exchange& client, const protocol::ApiError& why) {
                            e2b_text(client, why.status, why.message);
                          });
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
  if (!runners::prepare_cwd(cwd, error)) return e2b_text(ex, 500, error);
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
