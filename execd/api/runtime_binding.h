// execd/api/runtime_binding: the routes of the runtime binding
// (execd/lifecycle/runtime_binding, which says what a binding does):
//   POST /internal/init  one-shot (POST /init, its 1.1.1 name, is the same
//                route): sandbox id and generation, the token's SHA-256,
//                the environment every later process gets, telemetry
//                attributes, lifecycle hooks, the entrypoint policy
//   GET  /ready  200 once bound and the preStart hooks have run, else 503
#pragma once

#include "execd/lifecycle/runtime_binding.h"
#include "execd/routes.h"

namespace execd::api {

void add_runtime_routes(RouteTable& routes, lifecycle::RuntimeBinding& binding);

}  // namespace execd::api
