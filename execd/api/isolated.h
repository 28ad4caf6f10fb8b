// execd/api/isolated: the /v1/isolated routes (OSEP-0013, the opensandbox
// 1.1.1 client's isolated_execution routes): decode with protocol/isolated,
// call the owner (execd/sessions/isolated), encode. Here the session routes
// and a session's files (the file routes, run on pool threads inside its
// mount namespace: FileService::mount); its runs are api/isolated_runs';
// diff and commit are api/isolated_layers'.
#pragma once

#include "execd/api/api.h"  // FileService, run_file_job (execd/files) as api:: names
#include "execd/http/exchange.h"
#include "execd/routes.h"
#include "execd/sessions/isolated.h"

namespace execd::api {

// `files`: the plain file service, whose gate, journal and budget a
// session's own file service shares.
void add_isolated_routes(RouteTable& routes, sessions::IsolatedRegistry& isolated, FileService& files);

// For the isolated route files: the session of the route's :id, or null
// once the refusal (503 without the isolator, 404) is answered.
bool require_isolation(sessions::IsolatedRegistry& reg, http::Exchange& ex);
sessions::IsolatedSession* require_session(sessions::IsolatedRegistry& reg, http::Exchange& ex);
void add_isolated_run_routes(RouteTable& routes, const std::string& session_prefix, sessions::IsolatedRegistry& reg);

inline constexpr const char* kSessionNotFound = "SESSION_NOT_FOUND";

}  // namespace execd::api
