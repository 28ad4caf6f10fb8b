// POST /init bodies (protocol/runtime_init): what binds and what is refused.
#include <doctest/doctest.h>

#include <string>

#include "protocol/runtime_init.h"

using execd::protocol::decode_init_request;
using execd::protocol::InitRequest;

namespace {
std::string refusal(std::string_view body) {
  auto r = decode_init_request(body);
  auto* msg = std::get_if<std::string>(&r);
  return msg ? *msg : std::string();
}
const std::string kHash = "sha256:" + std::string(64, 'A');
}  // namespace

TEST_CASE("a full binding decodes") {
  auto r = decode_init_request(R"({"sandboxId":"s","generation":2,"accessTokenHash":")" + kHash +
                               R"(","envs":{"A":"1","B_2":"x y"},"telemetry":{"attributes":{"team":"t"}},)"
                               R"("lifecycle":{"preStart":[{"name":"a","command":"true","timeoutSeconds":5}],)"
                               R"("periodic":[{"name":"p","argv":["true","x"],"intervalSeconds":30}]},)"
                               R"("entrypointPolicy":"restart","unknownField":1})");
  REQUIRE(std::holds_alternative<InitRequest>(r));
  const InitRequest& i = std::get<InitRequest>(r);
  CHECK(i.sandbox_id == "s");
  CHECK(i.generation == 2);
  CHECK(i.token_sha256 == std::string(64, 'a'));  // lowercased
  CHECK(i.envs.size() == 2);
  CHECK(i.telemetry_attributes.size() == 1);
  REQUIRE(i.pre_start.size() == 1);
  CHECK(i.pre_start[0].timeout_ms == 5000);
  REQUIRE(i.periodic.size() == 1);
  CHECK(i.periodic[0].argv.size() == 2);
  CHECK(i.periodic[0].interval_ms == 30000);
  CHECK(i.restart_entrypoint);
}

TEST_CASE("what is refused") {
  CHECK(refusal("") != "");
  CHECK(refusal("[]") != "");
  CHECK(refusal(R"({"generation":1})").find("sandboxId") != std::string::npos);
  CHECK(refusal(R"({"sandboxId":"","generation":1})").find("sandboxId") != std::string::npos);
  CHECK(refusal(R"({"sandboxId":"s","generation":"1"})").find("generation") != std::string::npos);
  CHECK(refusal(R"({"sandboxId":"s","generation":-1})").find("generation") != std::string::npos);
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"accessTokenHash":"sha256:zz"})").find("accessTokenHash") !=
        std::string::npos);
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"envs":{"EXECD_INIT":"0"}})").find("EXECD_INIT") !=
        std::string::npos);
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"envs":{"1A":"x"}})") != "");
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"telemetry":{"attributes":{"generation":"x"}}})")
            .find("reserved") != std::string::npos);
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"lifecycle":{"preStart":[{"name":"a b","command":"x"}]}})") != "");
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"lifecycle":{"preStart":[{"name":"a","command":"x"},)"
                R"({"name":"a","command":"y"}]}})")
            .find("twice") != std::string::npos);
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"lifecycle":{"periodic":[{"name":"a","argv":[]}]}})") != "");
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"entrypointPolicy":"later"})") != "");
  CHECK(refusal(R"({"sandboxId":"s","generation":1})") == "");  // the token question is the binding's
}
