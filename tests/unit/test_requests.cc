// Unit tests for request decoding (protocol/requests), the access-token
// comparison (protocol/token) and the router.
#include <doctest/doctest.h>

#include <string>
#include <variant>

#include "protocol/file_requests.h"
#include "protocol/requests.h"
#include "protocol/router.h"
#include "protocol/token.h"

using namespace execd::protocol;

namespace {
std::string decode_error(const std::string& body) {
  auto r = decode_command_request(body);
  if (auto* e = std::get_if<DecodeError>(&r)) return e->message;
  return "";
}
}  // namespace

TEST_CASE("command requests decode every field") {
  auto r = decode_command_request(
      R"({"command":"ls","cwd":"/tmp","background":true,"timeout":1500,"uid":1000,"gid":100,)"
      R"("envs":{"A":"1","B":"x y"},"tty":true,"rows":40,"cols":120,"unknown":[1,2]})");
  REQUIRE(std::holds_alternative<CommandRequest>(r));
  auto& c = std::get<CommandRequest>(r);
  CHECK(c.command == "ls");
  CHECK(c.cwd == "/tmp");
  CHECK(c.background);
  CHECK(c.timeout_ms == 1500);
  CHECK(*c.uid == 1000);
  CHECK(*c.gid == 100);
  CHECK(c.envs.at("B") == "x y");
  CHECK(c.tty);
  CHECK(c.rows == 40);
  CHECK(c.cols == 120);
}

TEST_CASE("null string fields are empty, as in Go") {
  auto r = decode_command_request(R"({"command":"true","cwd":null,"envs":null})");
  REQUIRE(std::holds_alternative<CommandRequest>(r));
  CHECK(std::get<CommandRequest>(r).cwd.empty());
}

TEST_CASE("argv: literal arguments instead of shell text, exactly one of the two") {
  auto r = decode_command_request(R"J({"argv":["python3","-c","print(1)","a b","","$HOME"]})J");
  REQUIRE(std::holds_alternative<CommandRequest>(r));
  const auto& req = std::get<CommandRequest>(r);
  CHECK(req.command.empty());
  CHECK(req.argv == std::vector<std::string>{"python3", "-c", "print(1)", "a b", "", "$HOME"});
  CHECK(decode_error(R"({"argv":["ls"],"command":"ls"})").find("mutually exclusive") != std::string::npos);
  CHECK(decode_error(R"({"argv":[]})").find("argv[0] is required") != std::string::npos);
  CHECK(decode_error(R"({"argv":["","x"]})").find("argv[0] is required") != std::string::npos);
  CHECK(decode_error(R"({"argv":"ls"})").find("'argv'") != std::string::npos);
  CHECK(decode_error(R"({"argv":["ls",1]})").find("'argv'") != std::string::npos);
  CHECK(decode_error(R"({"argv":["ls","a\u0000b"]})").find("NUL") != std::string::npos);
  // null is absent, as for every field
  CHECK(decode_error(R"({"argv":null})").find("command is required") != std::string::npos);
  auto both_null = decode_command_request(R"({"argv":null,"command":"true"})");
  CHECK(std::holds_alternative<CommandRequest>(both_null));
}

TEST_CASE("argv is shown as the shell words that would run it") {
  CommandRequest req;
  req.argv = {"python3", "-c", "print('hi')", "a b", "", "x/y.z", "$HOME"};
  CHECK(command_text(req) == R"J(python3 -c 'print('\''hi'\'')' 'a b' '' x/y.z '$HOME')J");
  req.argv.clear();
  req.command = "echo $HOME";
  CHECK(command_text(req) == "echo $HOME");
}

TEST_CASE("bad command requests are rejected with a reason") {
  CHECK(decode_error("").find("empty") != std::string::npos);
  CHECK(decode_error("{").find("invalid request body") != std::string::npos);
  CHECK(decode_error("[1]").find("object") != std::string::npos);
  CHECK(decode_error(R"({"cwd":"/"})").find("command is required") != std::string::npos);
  CHECK(decode_error(R"({"command":""})").find("command is required") != std::string::npos);
  CHECK(decode_error(R"({"command":1})").find("'command'") != std::string::npos);
  CHECK(decode_error(R"({"command":"x","timeout":"5"})").find("'timeout'") != std::string::npos);
  CHECK(decode_error(R"({"command":"x","timeout":-1})").find("'timeout'") != std::string::npos);
  CHECK(decode_error(R"({"command":"x","uid":-1})").find("'uid'") != std::string::npos);
  CHECK(decode_error(R"({"command":"x","uid":4294967296})").find("'uid'") != std::string::npos);
  CHECK(decode_error(R"({"command":"x","gid":5})").find("uid is required when gid is provided") != std::string::npos);
  CHECK(decode_error(R"({"command":"x","envs":{"A":1}})").find("envs.A") != std::string::npos);
  CHECK(decode_error(R"({"command":"x","envs":{"A=B":"1"}})").find("environment") != std::string::npos);
  CHECK(decode_error(R"({"command":"x","background":"yes"})").find("'background'") != std::string::npos);
  CHECK(decode_error(R"({"command":"x","rows":0})").find("'rows'") != std::string::npos);
  CHECK(decode_error(R"({"command":"   "})").empty());  // whitespace-only is accepted, as by the Go daemon
}

TEST_CASE("token comparison") {
  CHECK(token_equal("secret", "secret"));
  CHECK_FALSE(token_equal("secret", "secreT"));
  CHECK_FALSE(token_equal("secret", "secret2"));
  CHECK_FALSE(token_equal("secret", ""));
  CHECK_FALSE(token_equal("", ""));  // no configured token never authorizes by comparison
}

TEST_CASE("router matches literals and captures, tells 404 from 405") {
  Router<int> r;
  r.add("GET", "/command/status/:id", 1);
  r.add("GET", "/command/:id/logs", 2);
  r.add("POST", "/command", 3);
  r.add("DELETE", "/command", 4);
  auto m = r.match("GET", "/command/status/abc");
  REQUIRE(m.outcome == Router<int>::Outcome::found);
  CHECK(*m.target == 1);
  CHECK(m.params.get("id") == "abc");
  m = r.match("GET", "/command/xyz/logs");
  CHECK(*m.target == 2);
  CHECK(m.params.get("id") == "xyz");
  CHECK(r.match("GET", "/command/status/").outcome == Router<int>::Outcome::not_found);
  CHECK(r.match("GET", "/command/").outcome == Router<int>::Outcome::not_found);
  CHECK(r.match("GET", "/nope").outcome == Router<int>::Outcome::not_found);
  m = r.match("PUT", "/command");
  CHECK(m.outcome == Router<int>::Outcome::method_not_allowed);
  CHECK(m.allow == "POST, DELETE");
}

#include "fs/expand.h"

TEST_CASE("path expansion follows Go's os.Expand") {
  auto lookup = [](std::string_view n) -> const char* {
    if (n == "HOME") return "/root";
    if (n == "A") return "x";
    return nullptr;
  };
  auto expand = [&](std::string_view in, bool allow = false) {
    std::string out, err;
    bool ok = execd::fs::expand_vars(in, lookup, out, err, allow);
    return ok ? out : "ERR:" + err;
  };
  CHECK(expand("$HOME/a") == "/root/a");
  CHECK(expand("${A}b$A") == "xbx");
  CHECK(expand("a$/b") == "a$/b");
  CHECK(expand("x${abc") == "xabc");
  CHECK(expand("p$1q$$r${*}s") == "pqrs");
  CHECK(expand("end$") == "end$");
  CHECK(expand("${}z") == "z");
  CHECK(expand("$NOPE/$ALSO") == "ERR:path references undefined environment variables: ALSO,NOPE");
  CHECK(expand("$NOPE/a", true) == "/a");
}

TEST_CASE("session and pty request bodies") {
  using namespace execd::protocol;
  auto create = decode_session_create("");
  REQUIRE(std::holds_alternative<SessionCreateRequest>(create));
  CHECK(std::get<SessionCreateRequest>(create).cwd.empty());
  CHECK(std::get<SessionCreateRequest>(decode_session_create(R"({"cwd":"/tmp/x","other":1})")).cwd == "/tmp/x");
  CHECK(std::get<DecodeError>(decode_session_create(R"({"cwd":3})")).message == "cwd must be a string");
  CHECK(std::get<DecodeError>(decode_session_create("[1]")).message == "invalid JSON body");
  CHECK(std::get<DecodeError>(decode_session_create("{")).message == "invalid JSON body");

  auto run = decode_session_run(R"({"command":"ls","cwd":null,"timeout":1500})");
  REQUIRE(std::holds_alternative<SessionRunRequest>(run));
  CHECK(std::get<SessionRunRequest>(run).command == "ls");
  CHECK(std::get<SessionRunRequest>(run).timeout_ms == 1500);
  CHECK(std::get<DecodeError>(decode_session_run("")).message == "invalid JSON body");
  CHECK(std::get<DecodeError>(decode_session_run("{}")).message == "command is required");
  CHECK(std::get<DecodeError>(decode_session_run(R"({"command":1})")).message == "command must be a string");
  CHECK(std::get<DecodeError>(decode_session_run(R"({"command":"x","timeout":1.5})")).message ==
        "timeout must be an integer (ms)");
  CHECK(std::get<DecodeError>(decode_session_run(R"({"command":"x","timeout":-1})")).message ==
        "timeout must be >= 0");

  auto pty = decode_pty_create(R"({"command":"top","cwd":"~"})");
  REQUIRE(std::holds_alternative<PtyCreateRequest>(pty));
  CHECK(std::get<PtyCreateRequest>(pty).command == "top");
  CHECK(std::get<PtyCreateRequest>(pty).cwd == "~");
  CHECK(std::holds_alternative<PtyCreateRequest>(decode_pty_create("  ")));
  CHECK(std::get<DecodeError>(decode_pty_create(R"({"command":[]})")).message == "cwd and command must be strings");
}

TEST_CASE("per-command limits decode and are validated") {
  auto r = decode_command_request(R"({"command":"x","limits":{"memory_bytes":1048576,"pids":10,"cpu_shares":512}})");
  REQUIRE(std::holds_alternative<CommandRequest>(r));
  auto& c = std::get<CommandRequest>(r);
  CHECK(c.limit_memory_bytes == 1048576);
  CHECK(c.limit_pids == 10);
  CHECK(c.limit_cpu_shares == 512);
  auto none = decode_command_request(R"({"command":"x","limits":{"pids":null}})");
  REQUIRE(std::holds_alternative<CommandRequest>(none));
  CHECK(std::get<CommandRequest>(none).limit_pids == 0);
  CHECK(decode_error(R"({"command":"x","limits":[1]})").find("'limits'") != std::string::npos);
  CHECK(decode_error(R"({"command":"x","limits":{"pids":0}})").find("limits.pids") != std::string::npos);
  CHECK(decode_error(R"({"command":"x","limits":{"pids":"5"}})").find("limits.pids") != std::string::npos);
  CHECK(decode_error(R"({"command":"x","limits":{"memory_bytes":-1}})").find("limits.memory_bytes") != std::string::npos);
  CHECK(decode_error(R"({"command":"x","limits":{"cpu":1}})").find("not a limit") != std::string::npos);
}

// ---- the file API's bodies (protocol/file_requests) -------------------------

TEST_CASE("file requests: permissions, in key order, with octal-digit modes") {
  using execd::protocol::decode_permission_map;
  using execd::protocol::mode_from_octal_digits;
  using execd::protocol::PermissionList;
  std::string err;
  CHECK(mode_from_octal_digits(755, err) == 0755u);
  CHECK(mode_from_octal_digits(4755, err) == 04755u);
  CHECK(mode_from_octal_digits(0, err) == 0u);
  for (int64_t bad : {758, -1, 17777}) CHECK_FALSE(mode_from_octal_digits(bad, err));
  auto ok = decode_permission_map(R"({"/b":{"mode":600,"owner":"root"},"/a":{},"/c":{"mode":null,"group":""}})");
  REQUIRE(std::holds_alternative<PermissionList>(ok));
  auto& list = std::get<PermissionList>(ok);
  REQUIRE(list.size() == 3);
  CHECK(list[0].first == "/a");
  CHECK(list[1].first == "/b");
  CHECK(list[1].second.mode == 0600u);
  CHECK(list[1].second.owner == "root");
  CHECK_FALSE(list[2].second.mode);
  CHECK_FALSE(list[2].second.group);  // "" leaves it alone
  auto zero = decode_permission_map(R"({"/z":{"mode":0}})");
  CHECK(std::get<PermissionList>(zero)[0].second.mode == 0u);  // an explicit 0 is a real mode
  // Go's decoder reads the first value and ignores what follows it.
  CHECK(std::holds_alternative<PermissionList>(decode_permission_map(R"(  {"/a":{}} trailing {)")));
  for (const char* bad : {R"({"/a":{"mode":758}})", R"({"/a":{"mode":-1}})", R"({"/a":{"mode":"755"}})",
                          R"({"/a":{"mode":7.5}})", R"({"/a":{"mode":18446744073709551615}})",
                          R"({"/a":{"owner":5}})", R"({"/a":[]})", "[]", "", "   ", "{", R"({"/a":)"}) {
    CAPTURE(bad);
    CHECK(std::holds_alternative<execd::protocol::DecodeError>(decode_permission_map(bad)));
  }
  CHECK(std::get<execd::protocol::DecodeError>(decode_permission_map("")).message == "request body is empty");
}

TEST_CASE("file requests: moves, replacements and upload metadata") {
  using namespace execd::protocol;
  auto moves = decode_move_list(R"([{"src":"/a","dest":"/b"},{"src":"/c"}])");
  REQUIRE(std::holds_alternative<std::vector<MoveItem>>(moves));
  auto& m = std::get<std::vector<MoveItem>>(moves);
  REQUIRE(m.size() == 2);
  CHECK(m[0].dest == "/b");
  CHECK(m[1].dest.empty());
  CHECK(std::get<DecodeError>(decode_move_list(R"([1])")).message == "item 0 must be a JSON object");
  CHECK(std::get<DecodeError>(decode_move_list(R"([{"src":1}])")).message == "item 0: 'src' must be a string");
  CHECK(std::get<DecodeError>(decode_move_list(R"({})")).message == "request body must be a JSON array");
  auto rep = decode_replace_map(R"({"/f":{"old":"a","new":null}})");
  REQUIRE(std::holds_alternative<std::vector<ReplaceItem>>(rep));
  CHECK(std::get<std::vector<ReplaceItem>>(rep)[0].old_text == "a");
  CHECK(std::get<std::vector<ReplaceItem>>(rep)[0].new_text.empty());
  CHECK(std::get<DecodeError>(decode_replace_map(R"({"/f":1})")).message == "/f: entry must be a JSON object");
  auto meta = decode_upload_metadata(R"({"path":"/x","mode":644,"owner":"root"})");
  REQUIRE(std::holds_alternative<UploadMetadata>(meta));
  CHECK(std::get<UploadMetadata>(meta).path == "/x");
  CHECK(std::get<UploadMetadata>(meta).permissions.mode == 0644u);
  CHECK(std::get<DecodeError>(decode_upload_metadata(R"({"path":""})")).message == "metadata path is empty");
  CHECK(std::holds_alternative<DecodeError>(decode_upload_metadata(R"({"path":"/x","mode":9})")));
  CHECK(std::get<DecodeError>(decode_upload_metadata("[]")).message ==
        "invalid metadata format. metadata must be a JSON object");
}
