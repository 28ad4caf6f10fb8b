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

TEST_CASE("what is refused, in OpenSandbox's order and with its texts (model/init.go @714cac6b)") {
  CHECK(refusal("") == "invalid runtime init request: EOF");
  CHECK(refusal("[]").rfind("invalid runtime init request: ", 0) == 0);
  CHECK(refusal(R"({"generation":1})") == "sandboxId must not be blank");
  CHECK(refusal(R"({"sandboxId":"  ","generation":1})") == "sandboxId must not be blank");
  CHECK(refusal(R"({"sandboxId":")" + std::string(129, 'x') + R"(","generation":1})") ==
        "sandboxId must not exceed 128 characters");
  // Bytes after trimming, as Go's len(strings.TrimSpace(...)).
  CHECK(refusal(R"({"sandboxId":"  )" + std::string(128, 'x') + R"(  ","generation":1})") == "");
  CHECK(refusal(R"({"sandboxId":")" + std::string(43, 'x') + "\xc3\xa9\xc3\xa9" + R"(","generation":1})") == "");
  CHECK(refusal(R"({"sandboxId":")" + std::string(127, 'x') + "\xc3\xa9" + R"(","generation":1})") ==
        "sandboxId must not exceed 128 characters");
  CHECK(refusal(R"({"sandboxId":"s"})") == "generation must be a positive integer");
  CHECK(refusal(R"({"sandboxId":"s","generation":0})") == "generation must be a positive integer");
  CHECK(refusal(R"({"sandboxId":"s","generation":"1"})").rfind("invalid runtime init request: ", 0) == 0);
  CHECK(refusal(R"({"sandboxId":"s","generation":-1})").rfind("invalid runtime init request: ", 0) == 0);
  CHECK(refusal(R"({"sandboxId":"s","generation":1.5})").rfind("invalid runtime init request: ", 0) == 0);
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"entrypointPolicy":"later"})") ==
        R"(entrypointPolicy must be "keep" or "restart")");
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"envs":{"":"x"}})") == "envs must not contain blank keys");
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"envs":{")" + std::string(257, 'K') + R"(":"x"}})") ==
        "env key \"" + std::string(257, 'K') + "\" must not exceed 256 characters");
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"envs":{")" + std::string(256, 'K') + R"(":"x"}})") == "");
  for (std::string_view k : execd::protocol::kReservedEnvKeys)
    CHECK(refusal(R"({"sandboxId":"s","generation":1,"envs":{")" + std::string(k) + R"(":"x"}})") ==
          "env key \"" + std::string(k) + "\" is reserved by execd and must not be set via /internal/init");
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"envs":{"execd_envs":"x"}})") ==
        R"(env key "execd_envs" is reserved by execd and must not be set via /internal/init)");
  // Upstream checks nothing else: other EXECD_* names and odd names pass.
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"envs":{"EXECD_INIT":"0","1A":"x","a-b c":"y"}})") == "");
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"lifecycle":{"preStart":[{"name":"a b","command":"x"}]}})")
            .rfind("invalid lifecycle: ", 0) == 0);
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"lifecycle":{"preStart":[{"name":"a","command":"x"},)"
                R"({"name":"a","command":"y"}]}})")
            .find("twice") != std::string::npos);
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"lifecycle":{"periodic":[{"name":"a","argv":[]}]}})") != "");
  std::string many;
  for (int i = 0; i < 65; ++i) many += (i ? "," : "") + std::string("\"k") + std::to_string(i) + "\":\"v\"";
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"telemetry":{"attributes":{)" + many + "}}}") ==
        "telemetry attributes must not exceed 64 entries");
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"telemetry":{"attributes":{" ":"v"}}})") ==
        "telemetry attributes must not contain blank keys");
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"telemetry":{"attributes":{")" + std::string(129, 'k') +
                R"(":"v"}}})") == "telemetry attribute key \"" + std::string(129, 'k') + "\" must not exceed 128 characters");
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"telemetry":{"attributes":{"k":")" + std::string(1025, 'v') +
                R"("}}})") == R"(telemetry attribute "k" value must not exceed 1024 bytes)");
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"accessTokenHash":"md5:00"})") ==
        "access token hash must use sha256:<hex> format");
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"accessTokenHash":"sha256:zz"})") ==
        "access token hash is not valid hex: encoding/hex: invalid byte: U+007A 'z'");
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"accessTokenHash":"sha256:abc"})") ==
        "access token hash is not valid hex: encoding/hex: odd length hex string");
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"accessTokenHash":"sha256:abcd"})") ==
        "access token hash must be 32 hex bytes, got 2");
  // The order: the first failing check is the one reported.
  CHECK(refusal(R"({"sandboxId":"","generation":0,"entrypointPolicy":"x"})") == "sandboxId must not be blank");
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"entrypointPolicy":"x","envs":{"":"v"}})") ==
        R"(entrypointPolicy must be "keep" or "restart")");
  CHECK(refusal(R"({"sandboxId":"s","generation":1,"accessTokenHash":"x","telemetry":{"attributes":{" ":"v"}}})") ==
        "telemetry attributes must not contain blank keys");
  CHECK(refusal(R"({"sandboxId":"s","generation":1})") == "");  // the token question is the binding's
}

TEST_CASE("reserved telemetry keys are dropped with a warning, not refused") {
  auto r = decode_init_request(
      R"({"sandboxId":" s ","generation":18446744073709551615,"accessTokenHash":" )" + kHash +
      R"( ","telemetry":{"attributes":{"sandbox_id":"x","generation":"y","team":"t"}}})");
  REQUIRE(std::holds_alternative<InitRequest>(r));
  const InitRequest& i = std::get<InitRequest>(r);
  CHECK(i.sandbox_id == "s");
  CHECK(i.generation == 18446744073709551615ull);
  CHECK(i.token_sha256 == std::string(64, 'a'));
  REQUIRE(i.telemetry_attributes.size() == 1);
  CHECK(i.telemetry_attributes[0].first == "team");
  CHECK(i.warnings == std::vector<std::string>{"telemetry attribute sandbox_id is reserved and was dropped",
                                               "telemetry attribute generation is reserved and was dropped"});
}

TEST_CASE("OPENSANDBOX_EXECD_METRICS_EXTRA_ATTRS as attrs.go @31bc3664 reads it") {
  using execd::protocol::parse_metric_extra_attrs;
  using Attrs = std::vector<std::pair<std::string, std::string>>;
  // Upstream's own test vector.
  CHECK(parse_metric_extra_attrs("tenant=t1, zone=cn-hz,invalid,noeq=, =blank") ==
        Attrs{{"tenant", "t1"}, {"zone", "cn-hz"}});
  CHECK(parse_metric_extra_attrs("  ").empty());
  CHECK(parse_metric_extra_attrs("a=b=c,sandbox_id=x,a=d") == Attrs{{"a", "b=c"}, {"a", "d"}});
  CHECK(parse_metric_extra_attrs(",,k = v ,") == Attrs{{"k", "v"}});
}
