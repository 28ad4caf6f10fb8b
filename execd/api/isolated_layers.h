// execd/api/isolated_layers: an isolated session's persistent overlays as
// layers (fs/layer):
//   GET  .../session/{id}/diff     {"session_id", "changes": [{path, change, type, size}], "truncated"}
//   POST .../session/{id}/commit   the upper directories as one OCI-style tar.gz, streamed
// Both read the upper directories on the host (no namespace to enter), on
// the threadpool through the file gate; the tarball goes a piece at a time,
// each piece only once the client took the last.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "execd/work_gate.h"
#include "execd/http/exchange.h"
#include "execd/routes.h"
#include "fs/layer.h"

namespace execd::api {

using LayerSource = fs::LayerSource;

struct LayerSet {
  std::string session;
  std::vector<LayerSource> layers;
};

struct LayerScope {
  // The session's layers; false when the answer (404, 503) was already sent.
  std::function<bool(http::Exchange&, LayerSet&)> find;
  WorkGate& gate;
  uv_loop_t* loop;
};

void add_layer_routes(RouteTable& routes, const std::string& session_prefix, LayerScope scope);

}  // namespace execd::api
