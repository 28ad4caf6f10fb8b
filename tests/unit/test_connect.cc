// Unit tests for protocol/connect and protocol/envd: Connect envelopes read
// back at every split point, end-of-stream messages, error codes, and the
// proto3 JSON mapping of envd's messages as the E2B SDKs write and read them
// (the request bodies below are what e2b 2.63 sends, byte for byte).
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "protocol/connect.h"
#include "protocol/envd.h"

using namespace execd::protocol;
namespace cn = execd::protocol::connect;
namespace envd = execd::protocol::envd;

namespace {

struct Read {
  std::vector<std::pair<uint8_t, std::string>> messages;
  bool ok = true;
};

Read read_in_pieces(const std::string& body, size_t piece, size_t max = 1 << 20) {
  cn::EnvelopeReader r(max);
  Read out;
  for (size_t at = 0; at < body.size() && out.ok; at += piece)
    out.ok = r.feed(std::string_view(body).substr(at, piece), [&](const cn::EnvelopeReader::Message& m) {
      out.messages.emplace_back(m.flags, std::string(m.payload));
      return true;
    });
  if (out.ok) out.ok = r.finish();
  return out;
}

}  // namespace

TEST_CASE("connect: envelopes read back whatever the pieces") {
  std::string body;
  cn::append_envelope(body, 0, R"({"process":{"pid":7}})");
  cn::append_envelope(body, 0, "");
  cn::append_envelope(body, 0, std::string(70000, 'x'));
  cn::append_end_stream(body, nullptr);
  for (size_t piece : {1, 2, 5, 6, 7, 4096, 1 << 20}) {
    Read r = read_in_pieces(body, piece);
    REQUIRE(r.ok);
    REQUIRE(r.messages.size() == 4);
    CHECK(r.messages[0].second == R"({"process":{"pid":7}})");
    CHECK(r.messages[1].second.empty());
    CHECK(r.messages[2].second.size() == 70000);
    CHECK(r.messages[3].first == cn::kFlagEndStream);
    CHECK(r.messages[3].second == "{}");
  }
}

TEST_CASE("connect: malformed bodies are refused with a reason") {
  std::string compressed;
  cn::append_envelope(compressed, cn::kFlagCompressed, "xx");
  CHECK_FALSE(read_in_pieces(compressed, 3).ok);

  std::string big;
  cn::append_envelope(big, 0, std::string(100, 'a'));
  CHECK_FALSE(read_in_pieces(big, 100, 99).ok);
  CHECK(read_in_pieces(big, 100, 100).ok);

  std::string cut;
  cn::append_envelope(cut, 0, "hello");
  cut.pop_back();
  CHECK_FALSE(read_in_pieces(cut, 2).ok);
  CHECK_FALSE(read_in_pieces(std::string("\x00\x00\x00", 3), 1).ok);  // inside the header
  CHECK_FALSE(read_in_pieces(std::string("\x80\x00\x00\x00\x00", 5), 5).ok);  // unknown flag

  cn::EnvelopeReader r(1024);
  CHECK_FALSE(r.feed(compressed, [](const cn::EnvelopeReader::Message&) { return true; }));
  CHECK(r.error().find("compress") != std::string::npos);
}

TEST_CASE("connect: a callback can stop the reader") {
  std::string body;
  cn::append_envelope(body, 0, "a");
  cn::append_envelope(body, 0, "b");
  cn::EnvelopeReader r(10);
  int seen = 0;
  CHECK_FALSE(r.feed(body, [&](const cn::EnvelopeReader::Message&) {
    ++seen;
    return false;
  }));
  CHECK(seen == 1);
  CHECK_FALSE(r.failed());
}

TEST_CASE("connect: end of stream, errors, codes") {
  std::string out;
  cn::Error e{cn::Code::not_found, "process with pid 7 not found \xff"};
  cn::append_end_stream(out, &e, {{"execd-gap", "stdout 0-10"}});
  REQUIRE(out.size() > 5);
  CHECK(static_cast<uint8_t>(out[0]) == cn::kFlagEndStream);
  auto j = nlohmann::json::parse(out.substr(5));
  CHECK(j["error"]["code"] == "not_found");
  CHECK(j["error"]["message"].get<std::string>().find("pid 7") != std::string::npos);
  CHECK(j["metadata"]["execd-gap"][0] == "stdout 0-10");

  CHECK(cn::http_status(cn::Code::not_found) == 404);
  CHECK(cn::http_status(cn::Code::unauthenticated) == 401);
  CHECK(cn::http_status(cn::Code::resource_exhausted) == 429);
  CHECK(cn::http_status(cn::Code::canceled) == 499);
  CHECK(cn::code_name(cn::Code::failed_precondition) == "failed_precondition");
  CHECK(cn::code_from_name("deadline_exceeded") == cn::Code::deadline_exceeded);
  CHECK_FALSE(cn::code_from_name("nope"));
  CHECK(nlohmann::json::parse(cn::error_json({cn::Code::internal, "x"}))["code"] == "internal");
}

TEST_CASE("connect: request heads") {
  CHECK(cn::body_kind("application/json") == cn::BodyKind::unary_json);
  CHECK(cn::body_kind("Application/JSON; charset=utf-8") == cn::BodyKind::unary_json);
  CHECK(cn::body_kind("application/connect+json") == cn::BodyKind::stream_json);
  CHECK(cn::body_kind("application/proto") == cn::BodyKind::unsupported);
  CHECK(cn::body_kind("application/connect+proto") == cn::BodyKind::unsupported);
  CHECK(cn::parse_timeout_ms("60000") == 60000u);
  CHECK(cn::parse_timeout_ms("9999999999") == 9999999999u);
  CHECK_FALSE(cn::parse_timeout_ms("99999999999"));
  CHECK_FALSE(cn::parse_timeout_ms("-1"));
  CHECK_FALSE(cn::parse_timeout_ms(""));
}

TEST_CASE("envd: a StartRequest as the Python SDK sends it") {
  auto d = envd::decode_start(
      R"({"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],"envs":{"A":"1"},"cwd":"/tmp"},"stdin":false})");
  REQUIRE(std::holds_alternative<envd::StartRequest>(d));
  auto& r = std::get<envd::StartRequest>(d);
  CHECK(r.process.cmd == "/bin/bash");
  CHECK(r.process.args == std::vector<std::string>{"-l", "-c", "echo hi"});
  CHECK(r.process.envs.at("A") == "1");
  CHECK(r.process.cwd == "/tmp");
  CHECK(r.stdin_open == false);
  CHECK_FALSE(r.pty);

  auto p = envd::decode_start(R"({"process":{"cmd":"/bin/bash","args":["-i","-l"]},"pty":{"size":{"cols":80,"rows":"24"}},"tag":"t"})");
  REQUIRE(std::holds_alternative<envd::StartRequest>(p));
  auto& pr = std::get<envd::StartRequest>(p);
  REQUIRE(pr.pty);
  CHECK(pr.pty->cols == 80);
  CHECK(pr.pty->rows == 24);
  CHECK(pr.tag == "t");
  CHECK_FALSE(pr.stdin_open);  // absent: the handler opens it

  CHECK(std::holds_alternative<DecodeError>(envd::decode_start("[]")));
  CHECK(std::holds_alternative<DecodeError>(envd::decode_start(R"({"process":{"args":"x"}})")));
  CHECK(std::holds_alternative<DecodeError>(envd::decode_start(R"({"pty":{"size":{"cols":-1}}})")));
  CHECK(std::holds_alternative<DecodeError>(envd::decode_start(R"({"pty":{"size":{"cols":4294967296}}})")));
  CHECK(std::holds_alternative<envd::StartRequest>(envd::decode_start(R"({"process":null,"unknown":[1]})")));
}

TEST_CASE("envd: selectors, input bytes and signals") {
  auto s = envd::decode_selector_request(R"({"process":{"pid":"42"}})");
  REQUIRE(std::holds_alternative<envd::SelectorRequest>(s));
  CHECK(std::get<envd::SelectorRequest>(s).process.pid == 42u);
  CHECK(std::holds_alternative<DecodeError>(envd::decode_selector_request(R"({"process":{"pid":1,"tag":"x"}})")));

  // Standard, URL-safe, unpadded: all the same bytes.
  for (const char* b64 : {"/+8=", "_-8", "/+8"}) {
    auto in = envd::decode_send_input(std::string(R"({"process":{"tag":"t"},"input":{"stdin":")") + b64 + "\"}}");
    REQUIRE(std::holds_alternative<envd::SendInputRequest>(in));
    auto& r = std::get<envd::SendInputRequest>(in);
    CHECK(r.process.tag == "t");
    CHECK(r.input.kind == envd::ProcessInput::Kind::stdin_bytes);
    CHECK(r.input.data == "\xff\xef");
  }
  CHECK(std::holds_alternative<DecodeError>(envd::decode_send_input(R"({"input":{"stdin":"a"}})")));
  CHECK(std::holds_alternative<DecodeError>(envd::decode_send_input(R"({"input":{"stdin":"YQ==","pty":"YQ=="}})")));

  auto k = envd::decode_send_signal(R"({"process":{"pid":3},"signal":"SIGNAL_SIGKILL"})");
  REQUIRE(std::holds_alternative<envd::SendSignalRequest>(k));
  CHECK(std::get<envd::SendSignalRequest>(k).signal == 9);
  auto t = envd::decode_send_signal(R"({"process":{"pid":3},"signal":15})");
  CHECK(std::get<envd::SendSignalRequest>(t).signal == 15);
  CHECK(std::holds_alternative<DecodeError>(envd::decode_send_signal(R"({"signal":"SIGHUP"})")));
  // descendants (field 3, infra PR 3617): absent and null are false; only a boolean is one.
  CHECK_FALSE(std::get<envd::SendSignalRequest>(k).descendants);
  auto g = envd::decode_send_signal(R"({"process":{"pid":3},"signal":9,"descendants":true})");
  REQUIRE(std::holds_alternative<envd::SendSignalRequest>(g));
  CHECK(std::get<envd::SendSignalRequest>(g).descendants);
  CHECK_FALSE(std::get<envd::SendSignalRequest>(
                  envd::decode_send_signal(R"({"process":{"pid":3},"signal":9,"descendants":null})"))
                  .descendants);
  CHECK(std::holds_alternative<DecodeError>(envd::decode_send_signal(R"({"signal":9,"descendants":"yes"})")));
  CHECK(std::holds_alternative<DecodeError>(envd::decode_send_signal(R"({"signal":9,"descendants":1})")));

  auto st = envd::decode_stream_input(R"({"start":{"process":{"pid":5}}})");
  CHECK(std::get<envd::StreamInputEvent>(st).kind == envd::StreamInputEvent::Kind::start);
  auto dt = envd::decode_stream_input(R"({"data":{"input":{"pty":"aGk="}}})");
  CHECK(std::get<envd::StreamInputEvent>(dt).input.data == "hi");
  CHECK(std::get<envd::StreamInputEvent>(envd::decode_stream_input(R"({"keepalive":{}})")).kind ==
        envd::StreamInputEvent::Kind::keepalive);
  CHECK(std::holds_alternative<DecodeError>(envd::decode_stream_input(R"({"start":{},"keepalive":{}})")));
}

TEST_CASE("envd: process events in proto3 JSON") {
  std::string out;
  envd::append_start_event(out, 1234);
  CHECK(out == R"({"event":{"start":{"pid":1234}}})");
  out.clear();
  const uint8_t bytes[] = {'h', 'i', 0xff};
  envd::append_data_event(out, envd::DataStream::stderr_bytes, bytes, 3);
  CHECK(out == R"({"event":{"data":{"stderr":"aGn/"}}})");
  out.clear();
  envd::append_end_event(out, {0, true, "exit status 0", std::nullopt});
  CHECK(out == R"({"event":{"end":{"exited":true,"status":"exit status 0"}}})");
  out.clear();
  envd::append_end_event(out, {-1, false, "signal: killed", std::string("signal: killed")});
  CHECK(out == R"({"event":{"end":{"exitCode":-1,"status":"signal: killed","error":"signal: killed"}}})");
  out.clear();
  envd::append_keepalive_event(out);
  CHECK(out == R"({"event":{"keepalive":{}}})");

  envd::ProcessInfo p;
  p.config.cmd = "/bin/bash";
  p.config.args = {"-l", "-c", "sleep 1"};
  p.pid = 9;
  p.tag = "x";
  auto j = nlohmann::json::parse(envd::list_response({p}));
  CHECK(j["processes"][0]["config"]["args"][2] == "sleep 1");
  CHECK(j["processes"][0]["pid"] == 9);
  CHECK(j["processes"][0]["tag"] == "x");
  CHECK_FALSE(j["processes"][0]["config"].contains("cwd"));
}

TEST_CASE("envd: filesystem messages") {
  auto w = envd::decode_watch(R"({"path":"/tmp","recursive":true,"include_entry":true,"allowNetworkMounts":false})");
  auto& wr = std::get<envd::WatchRequest>(w);
  CHECK(wr.path == "/tmp");
  CHECK(wr.recursive);
  CHECK(wr.include_entry);
  CHECK(std::get<envd::WatcherIdRequest>(envd::decode_watcher_id(R"({"watcher_id":"abc"})")).watcher_id == "abc");
  CHECK(std::get<envd::ListDirRequest>(envd::decode_list_dir(R"({"path":"/","depth":3})")).depth == 3);
  CHECK(std::get<envd::MoveRequest>(envd::decode_move(R"({"source":"a","destination":"b"})")).destination == "b");

  envd::EntryInfo e;
  e.name = "f";
  e.type = envd::FileType::file;
  e.path = "/tmp/f";
  e.size = 5000000000;
  e.mode = 0644;
  e.permissions = "-rw-r--r--";
  e.owner = "root";
  e.group = "root";
  e.modified = timespec{0, 5000000};
  auto j = nlohmann::json::parse(envd::entry_response(e));
  CHECK(j["entry"]["type"] == "FILE_TYPE_FILE");
  CHECK(j["entry"]["size"] == "5000000000");
  CHECK(j["entry"]["mode"] == 420);
  CHECK(j["entry"]["modifiedTime"] == "1970-01-01T00:00:00.005Z");
  CHECK_FALSE(j["entry"].contains("isSymlink"));

  envd::FsEvent ev{"a/b", envd::EventType::create, std::nullopt};
  std::string out;
  envd::append_watch_event(out, ev);
  CHECK(out == R"({"filesystem":{"name":"a/b","type":"EVENT_TYPE_CREATE"}})");
}

TEST_CASE("envd: Go's file mode strings and protobuf timestamps") {
  CHECK(envd::go_file_mode_string(S_IFREG | 0644) == "-rw-r--r--");
  CHECK(envd::go_file_mode_string(S_IFDIR | 0755) == "drwxr-xr-x");
  CHECK(envd::go_file_mode_string(S_IFLNK | 0777) == "Lrwxrwxrwx");
  CHECK(envd::go_file_mode_string(S_IFCHR | 0666) == "Dcrw-rw-rw-");
  CHECK(envd::go_file_mode_string(S_IFREG | S_ISUID | 0755) == "urwxr-xr-x");
  CHECK(envd::go_file_mode_string(S_IFDIR | S_ISVTX | 0777) == "dtrwxrwxrwx");
  CHECK(envd::go_file_mode_string(S_IFIFO | 0600) == "prw-------");
  CHECK(envd::timestamp_json({1700000000, 0}) == "2023-11-14T22:13:20Z");
  CHECK(envd::timestamp_json({1700000000, 123456000}) == "2023-11-14T22:13:20.123456Z");
  CHECK(envd::timestamp_json({1700000000, 1}) == "2023-11-14T22:13:20.000000001Z");
  CHECK(envd::decode_proto_bytes("") == std::string());
  CHECK_FALSE(envd::decode_proto_bytes("a"));
  CHECK_FALSE(envd::decode_proto_bytes("a$b="));
}
