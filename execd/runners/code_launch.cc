// execd/runners/code_launch: see header.
#include "execd/runners/code_launch.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "execd/exec/formats.h"
#include "protocol/errors.h"

namespace execd::runners {

namespace codes = protocol::codes;
namespace jp = protocol::jupyter;

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

namespace {

// What a code run brings to a launch (exec/launch): its context, there and
// idle when asked and again when it starts, and its stream (`format`; null:
// the OpenSandbox envelope in `framing`). Refusals are worded by `refuse_as`
// when there is one (E2B's /execute: as text).
class CodeRunStart final : public exec::RunStart {
 public:
  CodeRunStart(CodeRegistryImpl& reg, std::string context, std::string code, protocol::Framing framing,
               std::unique_ptr<exec::StreamFormat> format, std::optional<jp::EnvScript> env, RefuseAs refuse_as)
      : reg_(reg), context_(std::move(context)), code_(std::move(code)), framing_(framing), format_(std::move(format)),
        env_(std::move(env)), refuse_as_(std::move(refuse_as)) {}
  std::optional<protocol::ApiError> admission() override { return refusal(); }
  std::optional<protocol::ApiError> recheck() override { return refusal(); }
  std::unique_ptr<exec::StreamFormat> stream_format(http::Exchange&) override {
    return format_ ? std::move(format_) : exec::envelope_format(framing_, false);
  }
  std::unique_ptr<exec::Runner> start(exec::Execution& e, std::string&) override {
    auto run = std::make_unique<CodeRun>(e, std::move(code_));
    run->env = std::move(env_);
    reg_.find(context_)->begin_run(*run);
    return run;
  }
  void refuse(http::Exchange& client, const protocol::ApiError& why) override {
    if (refuse_as_) return refuse_as_(client, why);
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
  protocol::Framing framing_;
  std::unique_ptr<exec::StreamFormat> format_;
  std::optional<jp::EnvScript> env_;
  RefuseAs refuse_as_;
};

}  // namespace

void start_code_run(CodeRegistryImpl& reg, http::Exchange& ex, CodeContext& c, std::string code,
                    std::vector<std::string> track, protocol::Framing framing, std::unique_ptr<exec::StreamFormat> format,
                    std::optional<jp::EnvScript> env, RefuseAs refuse_as) {
  exec::ExecutionSpec spec;
  spec.kind = exec::Kind::code_run;
  spec.content = code;
  spec.owner = c.id();
  spec.language = c.language();
  spec.fingerprint = "code-run";
  spec.cwd = c.cwd();
  spec.track_changes = std::move(track);
  reg.launches.launch(&ex, std::move(spec),
                      std::make_unique<CodeRunStart>(reg, c.id(), std::move(code), framing, std::move(format), std::move(env),
                                                     std::move(refuse_as)),
                      false, static_cast<uint64_t>(reg.ctx.config.code_spill_limit_bytes));
}

}  // namespace execd::runners
