// execd/access: who may call execd, on which listener: the one
// authorization decision every route table asks (execd/routes).
//
// Two kinds of listener: execd's own (TCP and vsock, the OpenSandbox API)
// and the E2B ones (--envd-port, --code-interpreter-port). execd's access
// token opens both; an envd token (--envd-access-token) opens only the E2B
// ones. A listener takes no credential at all only in the explicit insecure
// mode: execd's own with --insecure-no-auth, an E2B one with
// --insecure-no-auth and no envd token. Anything else that reaches a port
// (a command of another uid, an isolated session on the shared network)
// therefore gains nothing without a token.
//
// --runtime-init holds every listener until POST /init binds execd: the
// tables then answer only their probes and /init. A binding may replace
// execd's token by its SHA-256 (execd never holds that token then), which
// both kinds of listener check from then on.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "execd/config.h"
#include "execd/http/exchange.h"

namespace execd {

enum class Listener { execd, e2b };

class Access {
 public:
  explicit Access(const Config& cfg);

  // No credential is asked for on `l` (the insecure mode).
  bool open(Listener l) const;
  // The request carries a credential `l` takes (or `l` is open). Tokens are
  // compared in constant time.
  bool authorized(Listener l, const http::Exchange& ex) const;
  // The headers `l` looks for a token in (lowercase).
  const std::vector<std::string>& token_headers(Listener l) const;
  // The raw tokens an E2B signed URL may be signed with (envd's
  // `signature`): the envd token, and execd's own unless a binding replaced
  // it by its hash.
  std::vector<std::string_view> signing_tokens() const;
  // Who an authorized request on execd's listener is, for records that
  // belong to a caller (execd/api/operations): the SHA-256 (hex) of the
  // token it brought, or "" when the listener is open (one anonymous caller).
  std::string execd_principal(const http::Exchange& ex) const;

  // --runtime-init and not bound yet: every table holds.
  bool held() const { return held_; }
  // POST /init bound execd: `token_sha256` (64 lowercase hex digits, or
  // empty to keep execd's token) is checked from now on.
  void bind(std::string token_sha256);
  // execd has a token of its own (raw or bound hash).
  bool has_execd_token() const { return !token_.empty() || !token_sha256_.empty(); }

 private:
  bool execd_token_matches(const std::string& given) const;

  std::string token_;         // execd's own; empty with --insecure-no-auth or a warm execd
  std::string token_sha256_;  // set by bind(): checked instead of token_
  std::string envd_token_;
  bool insecure_ = false;
  bool held_ = false;
};

}  // namespace execd
