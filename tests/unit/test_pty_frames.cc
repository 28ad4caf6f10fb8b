// Unit tests for protocol/pty_frames: server JSON frames (Go-identical bytes),
// replay header, client control-frame parsing.
#include <doctest/doctest.h>

#include <csignal>
#include <string>
#include <variant>

#include "protocol/pty_frames.h"

using namespace execd::protocol;

TEST_CASE("pty frames: server JSON text frames match Go's WriteJSON output") {
  CHECK(pty_connected_json("3f2b-11", "pty") ==
        "{\"type\":\"connected\",\"session_id\":\"3f2b-11\",\"mode\":\"pty\"}\n");
  CHECK(pty_connected_json("s", "pipe") == "{\"type\":\"connected\",\"session_id\":\"s\",\"mode\":\"pipe\"}\n");
  CHECK(pty_viewer_connected_json("s", "pty") ==
        "{\"type\":\"connected\",\"session_id\":\"s\",\"mode\":\"pty\",\"role\":\"viewer\"}\n");
  CHECK(pty_exit_json(0) == "{\"type\":\"exit\",\"exit_code\":0}\n");
  CHECK(pty_exit_json(-1) == "{\"type\":\"exit\",\"exit_code\":-1}\n");
  CHECK(pty_exit_json(130) == "{\"type\":\"exit\",\"exit_code\":130}\n");
  CHECK(pty_pong_json() == "{\"type\":\"pong\"}\n");
  CHECK(pty_error_json(pty_error_code::start_failed, "fork/exec /bin/bash: no such file") ==
        "{\"type\":\"error\",\"error\":\"fork/exec /bin/bash: no such file\",\"code\":\"START_FAILED\"}\n");
  CHECK(pty_error_json(pty_error_code::invalid_frame, "") == "{\"type\":\"error\",\"code\":\"INVALID_FRAME\"}\n");
  CHECK(pty_gap_json(5, 1048576) == "{\"type\":\"gap\",\"requested\":5,\"available_from\":1048576}\n");
}

TEST_CASE("pty frames: JSON escaping follows Go's encoder") {
  CHECK(pty_error_json("X", "a<b>&\"c\"\\\n\t\x01") ==
        "{\"type\":\"error\",\"error\":\"a\\u003cb\\u003e\\u0026\\\"c\\\"\\\\\\n\\t\\u0001\",\"code\":\"X\"}\n");
  CHECK(pty_error_json("X", "sep\xe2\x80\xa8par\xe2\x80\xa9 \xc3\xa9") ==
        "{\"type\":\"error\",\"error\":\"sep\\u2028par\\u2029 \xc3\xa9\",\"code\":\"X\"}\n");
  // Invalid UTF-8 becomes U+FFFD rather than failing.
  CHECK(pty_error_json("X", "bad\xff") == "{\"type\":\"error\",\"error\":\"bad\xef\xbf\xbd\",\"code\":\"X\"}\n");
}

TEST_CASE("pty frames: unknown frame type message quotes like Go %q") {
  CHECK(pty_unknown_frame_type_message("foo") == "unknown frame type \"foo\"");
  CHECK(pty_unknown_frame_type_message("") == "unknown frame type \"\"");
  CHECK(pty_unknown_frame_type_message("a\"b\\c") == "unknown frame type \"a\\\"b\\\\c\"");
  CHECK(pty_unknown_frame_type_message("\n\t\x01\x7f") == "unknown frame type \"\\n\\t\\x01\\x7f\"");
  CHECK(pty_unknown_frame_type_message("\xc3\xa9\xe2\x82\xac") == "unknown frame type \"\xc3\xa9\xe2\x82\xac\"");
  CHECK(pty_unknown_frame_type_message("\xc2\xa0\xe2\x80\x8b") == "unknown frame type \"\\u00a0\\u200b\"");
  CHECK(pty_unknown_frame_type_message("\xf3\xb0\x80\x80") == "unknown frame type \"\\U000f0000\"");
  CHECK(pty_unknown_frame_type_message("\xff") == "unknown frame type \"\\xff\"");
}

TEST_CASE("pty frames: replay header") {
  const auto header = pty_replay_header(0x0102030405060708ull);
  CHECK(header[0] == 0x03);
  for (int i = 0; i < 8; ++i) CHECK(header[1 + i] == i + 1);
  const auto zero = pty_replay_header(0);
  CHECK(zero == std::array<uint8_t, 9>{3, 0, 0, 0, 0, 0, 0, 0, 0});
}

TEST_CASE("pty frames: client binary messages") {
  CHECK(pty_stdin_from_binary(std::string("\x00ls\n", 4)) == std::optional<std::string_view>("ls\n"));
  CHECK(pty_stdin_from_binary(std::string("\x00", 1)) == std::optional<std::string_view>(""));
  CHECK_FALSE(pty_stdin_from_binary(""));
  CHECK_FALSE(pty_stdin_from_binary("\x01hi"));
}

TEST_CASE("pty frames: signal names") {
  CHECK(pty_signal_number("SIGINT") == SIGINT);
  CHECK(pty_signal_number("SIGTERM") == SIGTERM);
  CHECK(pty_signal_number("SIGKILL") == SIGKILL);
  CHECK(pty_signal_number("SIGQUIT") == SIGQUIT);
  CHECK(pty_signal_number("SIGHUP") == SIGHUP);
  CHECK_FALSE(pty_signal_number("sigint"));
  CHECK_FALSE(pty_signal_number("INT"));
  CHECK_FALSE(pty_signal_number("SIGUSR1"));
}

TEST_CASE("pty frames: parsing client text frames") {
  SUBCASE("stdin") {
    const auto frame = parse_pty_client_text(R"({"type":"stdin","data":"echo hi\n"})");
    REQUIRE(std::holds_alternative<PtyStdinText>(frame));
    CHECK(std::get<PtyStdinText>(frame).data == "echo hi\n");
    const auto empty = parse_pty_client_text(R"({"type":"stdin"})");
    REQUIRE(std::holds_alternative<PtyStdinText>(empty));
    CHECK(std::get<PtyStdinText>(empty).data.empty());
  }
  SUBCASE("resize") {
    const auto frame = parse_pty_client_text(R"({"type":"resize","cols":120,"rows":40})");
    REQUIRE(std::holds_alternative<PtyResize>(frame));
    CHECK(std::get<PtyResize>(frame).cols == 120);
    CHECK(std::get<PtyResize>(frame).rows == 40);
    CHECK(std::get<PtyResize>(frame).applies());
    const auto partial = parse_pty_client_text(R"({"type":"resize","cols":120})");
    REQUIRE(std::holds_alternative<PtyResize>(partial));
    CHECK_FALSE(std::get<PtyResize>(partial).applies());
    const auto negative = parse_pty_client_text(R"({"type":"resize","cols":-1,"rows":5})");
    REQUIRE(std::holds_alternative<PtyResize>(negative));
    CHECK_FALSE(std::get<PtyResize>(negative).applies());
  }
  SUBCASE("signal and ping") {
    const auto frame = parse_pty_client_text(R"({"type":"signal","signal":"SIGINT"})");
    REQUIRE(std::holds_alternative<PtySignal>(frame));
    CHECK(std::get<PtySignal>(frame).name == "SIGINT");
    CHECK(std::holds_alternative<PtyPing>(parse_pty_client_text(R"({"type":"ping"})")));
    CHECK(std::holds_alternative<PtyPing>(parse_pty_client_text(" {\"type\" : \"ping\", \"extra\": [1, {}]} ")));
  }
  SUBCASE("unknown types") {
    const auto frame = parse_pty_client_text(R"({"type":"bogus"})");
    REQUIRE(std::holds_alternative<PtyUnknownType>(frame));
    CHECK(std::get<PtyUnknownType>(frame).type == "bogus");
    const auto missing = parse_pty_client_text(R"({"data":"x"})");
    REQUIRE(std::holds_alternative<PtyUnknownType>(missing));
    CHECK(std::get<PtyUnknownType>(missing).type.empty());
    CHECK(std::holds_alternative<PtyUnknownType>(parse_pty_client_text("null")));
    CHECK(std::holds_alternative<PtyUnknownType>(parse_pty_client_text(R"({"type":"PING"})")));
    CHECK(std::holds_alternative<PtyUnknownType>(parse_pty_client_text(R"({"type":null})")));
  }
  SUBCASE("keys match case-insensitively, last one wins") {
    CHECK(std::holds_alternative<PtyPing>(parse_pty_client_text(R"({"TYPE":"ping"})")));
    CHECK(std::holds_alternative<PtyPing>(parse_pty_client_text(R"({"type":"stdin","Type":"ping"})")));
    const auto frame = parse_pty_client_text(R"({"Type":"resize","Cols":3,"ROWS":4,"cols":5})");
    REQUIRE(std::holds_alternative<PtyResize>(frame));
    CHECK(std::get<PtyResize>(frame).cols == 5);
    CHECK(std::get<PtyResize>(frame).rows == 4);
  }
  SUBCASE("invalid JSON or wrong field types are ignored") {
    for (const char* text : {"", "not json", "{", R"({"type":"ping"} x)", "[]", "\"ping\"", "42", "true",
                             R"({"type":1})", R"({"type":"resize","cols":"80","rows":24})",
                             R"({"type":"resize","cols":80.5,"rows":24})", R"({"type":"resize","cols":8e1,"rows":24})",
                             R"({"type":"resize","cols":9223372036854775808,"rows":24})",
                             R"({"type":"stdin","data":5})", R"({"type":"signal","signal":["SIGINT"]})",
                             R"({"type":"bogus","rows":"x"})"}) {
      INFO("text: " << text);
      CHECK(std::holds_alternative<PtyInvalidJson>(parse_pty_client_text(text)));
    }
    // null fields keep their zero value, as in Go.
    const auto frame = parse_pty_client_text(R"({"type":"resize","cols":null,"rows":3})");
    REQUIRE(std::holds_alternative<PtyResize>(frame));
    CHECK(std::get<PtyResize>(frame).cols == 0);
  }
}
