// execd/api/envd/connect_rpc: see header.
#include "execd/api/envd/connect_rpc.h"

#include "protocol/base64.h"

namespace execd::api::rpc {

namespace {

constexpr const char* kJson = "application/json";
constexpr const char* kStreamJson = "application/connect+json";

// The checks every call shares; false when the exchange was answered.
bool call_info(http::Exchange& ex, CallInfo& info, bool streaming) {
  auto fail = [&](cn::Code code, std::string message) {
    cn::Error e{code, std::move(message)};
    if (streaming) stream_error(ex, e);
    else respond_error(ex, e);
    return false;
  };
  auto user = basic_auth_user(ex.header("authorization"));
  if (!user) return fail(cn::Code::unauthenticated, "malformed Authorization header: expected Basic base64(user:)");
  info.user = std::move(*user);
  if (const std::string* t = ex.header("connect-timeout-ms")) {
    auto ms = cn::parse_timeout_ms(*t);
    if (!ms) return fail(cn::Code::invalid_argument, "malformed Connect-Timeout-Ms: " + *t);
    info.timeout_ms = *ms;
  }
  if (const std::string* k = ex.header("keepalive-ping-interval")) {
    // Seconds, as envd reads it; anything else leaves envd's default.
    uint64_t secs = 0;
    bool ok = !k->empty() && k->size() < 7;
    for (char c : *k) ok = ok && c >= '0' && c <= '9';
    if (ok) {
      for (char c : *k) secs = secs * 10 + static_cast<uint64_t>(c - '0');
      info.keepalive_ms = secs * 1000;
    }
  }
  return true;
}

// A body of the wrong type: 415, as the protocol says, before anything else.
bool content_type_ok(http::Exchange& ex, cn::BodyKind want) {
  const std::string* type = ex.header("content-type");
  if (type && cn::body_kind(*type) == want) return true;
  ex.respond(415, kJson,
             cn::error_json({cn::Code::unknown, std::string("unsupported content type ") + (type ? *type : "(none)") +
                                                   "; this server speaks " +
                                                   (want == cn::BodyKind::unary_json ? kJson : kStreamJson)}),
             {std::string("Accept-Post: ") + (want == cn::BodyKind::unary_json ? kJson : kStreamJson)});
  return false;
}

}  // namespace

std::optional<std::string> basic_auth_user(const std::string* header) {
  if (!header) return std::string();
  std::string_view h = *header;
  if (h.size() < 6 || (h.substr(0, 6) != "Basic " && h.substr(0, 6) != "basic ")) return std::nullopt;
  h.remove_prefix(6);
  while (!h.empty() && h.front() == ' ') h.remove_prefix(1);
  auto decoded = protocol::base64_decode(h);
  if (!decoded) return std::nullopt;
  size_t colon = decoded->find(':');
  return colon == std::string::npos ? *decoded : decoded->substr(0, colon);
}

void add_unary(RouteTable& routes, const std::string& path, Handler h, RouteRules rules) {
  routes.add("POST", path, [h = std::move(h)](http::Exchange& ex) {
    if (!content_type_ok(ex, cn::BodyKind::unary_json)) return;
    CallInfo info;
    if (!call_info(ex, info, false)) return;
    h(ex, ex.request().body, info);
  }, rules);
}

void add_server_stream(RouteTable& routes, const std::string& path, Handler h, RouteRules rules) {
  routes.add("POST", path, [h = std::move(h)](http::Exchange& ex) {
    if (!content_type_ok(ex, cn::BodyKind::stream_json)) return;
    CallInfo info;
    if (!call_info(ex, info, true)) return;
    // A server-streaming request is exactly one message.
    cn::EnvelopeReader reader(ex.request().body.size());
    std::string message;
    int count = 0;
    bool ok = reader.feed(ex.request().body, [&](const cn::EnvelopeReader::Message& m) {
      if (m.flags & cn::kFlagEndStream) return true;
      message.assign(m.payload);
      return ++count == 1;
    });
    if (!ok || !reader.finish() || count != 1)
      return stream_error(ex, {cn::Code::invalid_argument,
                               reader.failed() ? "malformed request stream: " + reader.error()
                                               : "a server-streaming request needs exactly one message"});
    h(ex, message, info);
  }, rules);
}

void add_client_stream(RouteTable& routes, const std::string& path,
                       std::function<void(http::Exchange&, const CallInfo&)> head,
                       std::function<void(http::Exchange&)> complete, RouteRules rules) {
  routes.add_streaming(
      "POST", path,
      [head = std::move(head)](http::Exchange& ex) {
        const std::string* type = ex.header("content-type");
        if (!type || cn::body_kind(*type) != cn::BodyKind::stream_json) {
          // Answered once the body is in (nothing takes it meanwhile).
          ex.on_complete = [](http::Exchange& e) { content_type_ok(e, cn::BodyKind::stream_json); };
          return;
        }
        CallInfo info;
        auto user = basic_auth_user(ex.header("authorization"));
        if (!user) {
          ex.on_complete = [](http::Exchange& e) {
            stream_error(e, {cn::Code::unauthenticated, "malformed Authorization header"});
          };
          return;
        }
        info.user = std::move(*user);
        head(ex, info);
      },
      std::move(complete), rules);
}

void respond_unauthenticated(http::Exchange& ex) {
  ex.respond(401, kJson,
             cn::error_json({cn::Code::unauthenticated,
                             "unauthorized access, please provide a valid access token (X-Access-Token)"}));
}

}  // namespace execd::api::rpc
