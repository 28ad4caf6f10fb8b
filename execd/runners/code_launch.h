// execd/runners/code_launch: what a code run brings to a launch
// (exec/launch) for /code and E2B's /execute: its context (the language's
// default one, made on first use, or the one named), there and idle when
// asked and again when it starts, its spec (kind code_run) and its stream.
// The contexts and the runner (CodeRun) are runners/code's.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "execd/exec/launch.h"
#include "execd/http/exchange.h"
#include "execd/runners/code.h"
#include "protocol/envelope.h"
#include "protocol/errors.h"
#include "protocol/jupyter.h"

namespace execd::runners {

// A context's directory: created if missing, as the Go daemon does.
bool prepare_cwd(const std::string& cwd, std::string& error);

// The default context of a language (made on first use), or null with
// `status` and `error` set.
CodeContext* default_context(CodeRegistryImpl& reg, const std::string& language, int& status, std::string& error);

// How a dialect words a refusal of a run (null: execd's JSON error).
using RefuseAs = std::function<void(http::Exchange& client, const protocol::ApiError& why)>;

// Starts a run of `code` in context `c` for the client `ex`, streamed in
// `format` (null: the OpenSandbox envelope in `framing`); `env` is run
// before the code, `track` are its track_changes roots.
void start_code_run(CodeRegistryImpl& reg, http::Exchange& ex, CodeContext& c, std::string code,
                    std::vector<std::string> track, protocol::Framing framing,
                    std::unique_ptr<exec::StreamFormat> format = nullptr,
                    std::optional<protocol::jupyter::EnvScript> env = std::nullopt, RefuseAs refuse_as = nullptr);

}  // namespace execd::runners
