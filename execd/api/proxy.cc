// execd/api/proxy: see header.
#include "execd/api/proxy.h"

#include <string>

#include "execd/limits.h"
#include "protocol/errors.h"
#include "protocol/proxy.h"

namespace execd::api {

namespace {

namespace codes = protocol::codes;
using http::Exchange;

void proxy_head(proxy::ProxyService& svc, Exchange& ex) {
  const auto& req = ex.request();
  std::string_view port_text;
  std::string rest;
  protocol::split_proxy_target(req.target, port_text, rest);
  const int port = protocol::parse_proxy_port(port_text);
  if (port == 0 || port == svc.own_port()) {
    std::string message = port == 0 ? "invalid port '" + std::string(port_text) + "': expected 1-65535"
                                    : "port " + std::to_string(port) + " is execd itself";
    ex.on_complete = [message](Exchange& e) { e.respond_error(400, codes::kBadRequest, message); };
    return;
  }
  if (req.upgrade && svc.tunnels() >= svc.ctx().config.max_tunnels) {
    // Before anything is forwarded: the body, if any, is read and dropped.
    ex.on_complete = [&svc](Exchange& e) {
      admit(e, svc.tunnels(), svc.ctx().config.max_tunnels, "proxied tunnels", "max-tunnels");
    };
    return;
  }
  const std::string prefix = "/proxy/" + std::to_string(port);
  const std::string host_fallback = "127.0.0.1:" + std::to_string(port);
  protocol::UpstreamRequestInfo info;
  info.target = rest;
  info.client_ip = protocol::peer_ip(ex.peer());
  info.prefix = prefix;
  info.host_fallback = host_fallback;
  info.body = protocol::request_body_framing(req);
  svc.forward(ex, port, protocol::upstream_request_head(req, info), info.body);
}

}  // namespace

void add_proxy_routes(RouteTable& routes, proxy::ProxyService& proxy) {
  routes.add_prefix_streaming(
      "/proxy/", [&proxy](Exchange& ex) { proxy_head(proxy, ex); }, [](Exchange&) {});
}

}  // namespace execd::api
