// execd/api/sessions: the /session routes (create, run, delete). The bash
// sessions themselves are execd/sessions/bash's.
#pragma once

#include "execd/routes.h"
#include "execd/sessions/bash.h"

namespace execd::api {

void add_session_routes(RouteTable& routes, sessions::SessionRegistry& sessions);

}  // namespace execd::api
