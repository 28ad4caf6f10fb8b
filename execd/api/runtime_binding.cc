// execd/api/runtime_binding: see header.
#include "execd/api/runtime_binding.h"

#include <nlohmann/json.hpp>

#include "protocol/errors.h"

namespace execd::api {

namespace runtime_binding_impl {

void handle_init(lifecycle::RuntimeBinding& binding, http::Exchange& ex) {
  namespace codes = protocol::codes;
  auto decoded = protocol::decode_init_request(ex.request().body);
  if (auto* msg = std::get_if<std::string>(&decoded)) return ex.respond_error(400, codes::kInvalidRequestBody, *msg);
  auto bound = binding.bind(std::move(std::get<protocol::InitRequest>(decoded)));
  if (auto* refused = std::get_if<protocol::ApiError>(&bound))
    return ex.respond_error(refused->status, refused->code, refused->message);
  ex.respond(200, "application/json; charset=utf-8",
             protocol::init_response_json(binding.bound(), std::get<std::vector<std::string>>(bound)));
}

void handle_ready(const lifecycle::RuntimeBinding& binding, http::Exchange& ex) {
  const Context& ctx = binding.ctx();
  const protocol::InitRequest& bound = binding.bound();
  nlohmann::ordered_json j;
  j["initialized"] = binding.initialized() || !ctx.config.runtime_init;
  j["ready"] = binding.ready();
  j["sandboxId"] = binding.initialized() ? nlohmann::ordered_json(bound.sandbox_id) : nlohmann::ordered_json();
  j["generation"] = binding.initialized() ? nlohmann::ordered_json(bound.generation) : nlohmann::ordered_json();
  if (!binding.pre_start_error().empty()) j["error"] = binding.pre_start_error();
  if (ex.authorized) {  // not for anonymous probes
    if (binding.initialized() && !bound.telemetry_attributes.empty()) {
      nlohmann::ordered_json attrs = nlohmann::ordered_json::object();
      for (const auto& [k, v] : bound.telemetry_attributes) attrs[k] = v;
      j["telemetry"]["attributes"] = std::move(attrs);
    }
    // What upstream stamps on every metric data point (execd exports no
    // OTLP, and /metrics keeps the Go daemon's keys): a list, as a key may
    // repeat in OPENSANDBOX_EXECD_METRICS_EXTRA_ATTRS.
    nlohmann::ordered_json stamped = nlohmann::ordered_json::array();
    for (const auto& [k, v] : ctx.metric_attributes()) stamped.push_back({k, v});
    if (!stamped.empty()) j["metricAttributes"] = std::move(stamped);
  }
  ex.respond(binding.ready() ? 200 : 503, "application/json; charset=utf-8",
             j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace), {"Cache-Control: no-store"});
}

}  // namespace runtime_binding_impl

void add_runtime_routes(RouteTable& routes, lifecycle::RuntimeBinding& binding) {
  namespace impl = runtime_binding_impl;
  // Both answer while held (with the token, if execd has one): upstream
  // renamed /init to /internal/init after 1.1.1; one handler, one bind.
  for (const char* path : {"/internal/init", "/init"})
    routes.add("POST", path, [&binding](http::Exchange& ex) { impl::handle_init(binding, ex); }, {true, true, false});
  routes.add("GET", "/ready", [&binding](http::Exchange& ex) { impl::handle_ready(binding, ex); }, kProbe);
}

}  // namespace execd::api
