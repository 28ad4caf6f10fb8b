// execd/access: see header.
#include "execd/access.h"

#include "protocol/sha.h"
#include "protocol/token.h"

namespace execd {

namespace {
// execd's own header; E2B's SDKs send X-Access-Token, and the
// code-interpreter SDK only E2B-Traffic-Access-Token on /contexts.
const std::vector<std::string> kExecdHeaders{"x-execd-access-token"};
const std::vector<std::string> kE2bHeaders{"x-access-token", "e2b-traffic-access-token", "x-execd-access-token"};
}  // namespace

Access::Access(const Config& cfg)
    : token_(cfg.access_token),
      envd_token_(cfg.envd_access_token),
      insecure_(cfg.insecure_no_auth),
      held_(cfg.runtime_init) {}

bool Access::open(Listener l) const {
  if (!insecure_) return false;
  return l == Listener::execd || envd_token_.empty();
}

const std::vector<std::string>& Access::token_headers(Listener l) const {
  return l == Listener::execd ? kExecdHeaders : kE2bHeaders;
}

bool Access::execd_token_matches(const std::string& given) const {
  // A binding that gave a hash: execd never saw the token itself.
  if (!token_sha256_.empty())
    return protocol::token_equal(token_sha256_, protocol::lower_hex(protocol::sha256(given)));
  return !token_.empty() && protocol::token_equal(token_, given);
}

bool Access::authorized(Listener l, const http::Exchange& ex) const {
  if (open(l)) return true;
  // A warm execd without a token takes the first valid bind (POST /init is
  // the only route that answers while held).
  if (held_ && !has_execd_token()) return true;
  for (const auto& name : token_headers(l)) {
    const std::string* given = ex.header(name);
    if (!given) continue;
    if (execd_token_matches(*given)) return true;
    if (l == Listener::e2b && !envd_token_.empty() && protocol::token_equal(envd_token_, *given)) return true;
  }
  return false;
}

std::string Access::execd_principal(const http::Exchange& ex) const {
  if (open(Listener::execd)) return "";
  for (const auto& name : token_headers(Listener::execd)) {
    const std::string* given = ex.header(name);
    if (given && execd_token_matches(*given)) return protocol::lower_hex(protocol::sha256(*given));
  }
  return "";
}

std::vector<std::string_view> Access::signing_tokens() const {
  std::vector<std::string_view> out;
  if (!envd_token_.empty()) out.emplace_back(envd_token_);
  if (token_sha256_.empty() && !token_.empty()) out.emplace_back(token_);
  return out;
}

void Access::bind(std::string token_sha256) {
  held_ = false;
  if (!token_sha256.empty()) token_sha256_ = std::move(token_sha256);
}

}  // namespace execd
