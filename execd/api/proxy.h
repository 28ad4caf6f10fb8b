// execd/api/proxy: ANY /proxy/{port}/{rest...}: checks the port (never
// execd's own) and the tunnel limit, builds the upstream request head
// (protocol/proxy) and hands the exchange to execd/proxy, which relays it.
#pragma once

#include "execd/proxy/proxy.h"
#include "execd/routes.h"

namespace execd::api {

void add_proxy_routes(RouteTable& routes, proxy::ProxyService& proxy);

}  // namespace execd::api
