// tests/unit/test_config.cc — the command line (execd/config and its flag
// table, execd/config_flags): Go flag syntaxes, every Go execd 1.0.19 flag,
// token sources and their precedence, env fallbacks, unknown flags, and that
// what --help and the reference say agrees with what the parser takes.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "execd/config.h"
#include "execd/config_flags.h"

using execd::Config;

namespace {

std::map<std::string, std::string> g_env;

const char* fake_env(const char* name) {
  auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}

struct Parsed {
  std::string error;
  Config cfg;
};

Parsed parse(std::initializer_list<const char*> args, std::map<std::string, std::string> env = {}) {
  g_env = std::move(env);
  std::vector<std::string> storage{"execd"};
  for (const char* a : args) storage.emplace_back(a);
  std::vector<char*> argv;
  for (auto& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  Parsed p;
  p.error = execd::parse_config(static_cast<int>(storage.size()), argv.data(), p.cfg, fake_env);
  return p;
}

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& content) {
    char pattern[] = "/tmp/execd-config-test-XXXXXX";
    int fd = mkstemp(pattern);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()));
    close(fd);
    path = pattern;
  }
  ~TempFile() { unlink(path.c_str()); }
};

bool has_warning(const Config& cfg, const std::string& needle) {
  for (const auto& w : cfg.warnings)
    if (w.find(needle) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("config: every Go flag syntax for a value flag") {
  CHECK(parse({"-port=8080", "-insecure-no-auth"}).cfg.port == 8080);
  CHECK(parse({"--port=8081", "-insecure-no-auth"}).cfg.port == 8081);
  CHECK(parse({"-port", "8082", "-insecure-no-auth"}).cfg.port == 8082);
  CHECK(parse({"--port", "8083", "--insecure-no-auth"}).cfg.port == 8083);
  CHECK(parse({"--port", "8083", "--port=9", "--insecure-no-auth"}).cfg.port == 9);  // last one wins
  // The value of a non-bool flag is the next argument whatever it looks like.
  Parsed p = parse({"-access-token", "-starts-with-dash"});
  CHECK(p.error.empty());
  CHECK(p.cfg.access_token == "-starts-with-dash");
  p = parse({"--access-token=a=b=c"});
  CHECK(p.cfg.access_token == "a=b=c");
}

TEST_CASE("config: Go int syntax (ParseInt base 0)") {
  for (auto [text, value] : std::vector<std::pair<const char*, int>>{
           {"--port=0x1F90", 8080}, {"--port=017", 15}, {"--port=0o17", 15}, {"--port=0b11", 3},
           {"--port=8_080", 8080}, {"--port=+80", 80}, {"--port=0", 0}, {"--port=0x_1F", 31}}) {
    CAPTURE(text);
    Parsed p = parse({text, "--insecure-no-auth"});
    CHECK(p.error.empty());
    CHECK(p.cfg.port == value);
  }
  for (const char* bad : {"--port=", "--port=8_", "--port=_8", "--port=8__0", "--port=08", "--port=0x",
                          "--port=1.5", "--port=70000", "--port=-1", "--port= 80"}) {
    CAPTURE(bad);
    CHECK(parse({bad, "--insecure-no-auth"}).error.find("--port") != std::string::npos);
  }
  CHECK(parse({"--port"}).error.find("--port") != std::string::npos);  // missing value
}

TEST_CASE("config: bool flags") {
  CHECK(parse({"-insecure-no-auth"}).cfg.insecure_no_auth);
  CHECK(parse({"--insecure-no-auth"}).cfg.insecure_no_auth);
  for (const char* t : {"=true", "=1", "=t", "=T", "=TRUE", "=True"}) {
    std::string arg = std::string("-insecure-no-auth") + t;
    Parsed p = parse({arg.c_str()});
    CHECK(p.error.empty());
    CHECK(p.cfg.insecure_no_auth);
  }
  for (const char* f : {"=false", "=0", "=f", "=F", "=FALSE", "=False"}) {
    std::string arg = std::string("--insecure-no-auth") + f;
    Parsed p = parse({arg.c_str(), "--access-token=x"});
    CHECK(p.error.empty());
    CHECK_FALSE(p.cfg.insecure_no_auth);
  }
  // Go never takes a separate argument as a bool's value.
  CHECK(parse({"-insecure-no-auth", "false"}).error == "unexpected argument: false");
  CHECK(parse({"-insecure-no-auth=maybe"}).error.find("invalid boolean value") != std::string::npos);
  Parsed p = parse({"--init=true", "--insecure-no-auth"});
  CHECK(p.cfg.init_mode);
  CHECK(parse({"-h"}).cfg.show_help);
  CHECK(parse({"--help"}).cfg.show_help);
  CHECK(parse({"-version"}).cfg.show_version);
  CHECK(parse({"-help"}).error.empty());  // help needs no token
}

TEST_CASE("config: every Go execd 1.0.19 flag is accepted") {
  Parsed p = parse({"-jupyter-host", "http://127.0.0.1:8888", "-jupyter-token=Jt7x", "-port=1234", "-log-level", "7",
                    "-access-token", "Zq9tok", "-graceful-shutdown-timeout=3s", "-jupyter-idle-poll-interval", "250ms"});
  REQUIRE(p.error.empty());
  CHECK(p.cfg.port == 1234);
  CHECK(p.cfg.log_level == "7");
  CHECK(p.cfg.access_token == "Zq9tok");
  CHECK(p.cfg.access_token_source == "--access-token");
  CHECK(p.cfg.graceful_shutdown_ms == 3000);
  CHECK(p.cfg.jupyter_host == "http://127.0.0.1:8888");
  CHECK(p.cfg.jupyter_token == "Jt7x");
  CHECK(p.cfg.jupyter_idle_poll_interval_ms == 250);
  CHECK(p.cfg.warnings.size() == 3);
  CHECK(has_warning(p.cfg, "--jupyter-host accepted but ignored"));
  CHECK(has_warning(p.cfg, "--jupyter-token accepted but ignored"));
  CHECK(has_warning(p.cfg, "--jupyter-idle-poll-interval accepted but ignored"));
  for (const auto& w : p.cfg.warnings) {
    CHECK(w.find("Jt7x") == std::string::npos);  // no secret in a warning
    CHECK(w.find("Zq9tok") == std::string::npos);
  }
  // Go: a non-positive poll interval falls back to 100ms.
  CHECK(parse({"-jupyter-idle-poll-interval=0s", "-insecure-no-auth"}).cfg.jupyter_idle_poll_interval_ms == 100);
  CHECK(parse({"-jupyter-idle-poll-interval=soon", "-insecure-no-auth"}).error.find("duration") != std::string::npos);
  // No Jupyter flags, no warnings.
  CHECK(parse({"-access-token=x"}).cfg.warnings.empty());
}

TEST_CASE("config: Go log levels and durations") {
  auto level = [](const char* arg) { return parse({arg, "--insecure-no-auth"}).cfg.log_level; };
  CHECK(level("--log-level=6") == "6");
  CHECK(level("--log-level=0x7") == "7");
  CHECK(level("--log-level=-1") == "0");
  CHECK(level("--log-level=42") == "7");
  CHECK(level("--log-level=debug") == "debug");
  CHECK(parse({"--log-level=loud", "--insecure-no-auth"}).error.find("--log-level") != std::string::npos);

  auto grace = [](const char* arg) {
    Parsed p = parse({arg, "--insecure-no-auth"});
    CHECK(p.error.empty());
    return p.cfg.graceful_shutdown_ms;
  };
  CHECK(grace("--graceful-shutdown-timeout=1h30m") == 5400000);
  CHECK(grace("--graceful-shutdown-timeout=1.5s") == 1500);
  CHECK(grace("--graceful-shutdown-timeout=2500us") == 2);
  CHECK(grace("--graceful-shutdown-timeout=2500\xC2\xB5s") == 2);
  CHECK(grace("--graceful-shutdown-timeout=1m0.5s") == 60500);
  CHECK(grace("--graceful-shutdown-timeout=0") == 0);
  CHECK(grace("--graceful-shutdown-timeout=-1s") == 0);  // Go accepts it: no drain
  CHECK(grace("--graceful-shutdown-timeout=750") == 750);  // execd: bare number = ms
  for (const char* bad : {"--graceful-shutdown-timeout=1x", "--graceful-shutdown-timeout=s",
                          "--graceful-shutdown-timeout=1.s5", "--graceful-shutdown-timeout="}) {
    CAPTURE(bad);
    CHECK_FALSE(parse({bad, "--insecure-no-auth"}).error.empty());
  }
  CHECK(execd::parse_duration_ms("2s") == 2000);
  CHECK(execd::parse_duration_ms("1500") == 1500);
  CHECK(execd::parse_duration_ms("-1s") == -1);
  CHECK(execd::parse_duration_ms("") == -1);
}

TEST_CASE("config: access token sources, first found wins") {
  TempFile file("from-file\n");
  TempFile env_file("from-env-file \r\n");
  TempFile empty("\n");
  const std::map<std::string, std::string> all_env = {{"EXECD_ACCESS_TOKEN", "from-env"},
                                                      {"EXECD_ACCESS_TOKEN_FILE", env_file.path}};

  Parsed p = parse({"--access-token=from-flag", "--access-token-file", file.path.c_str()}, all_env);
  REQUIRE(p.error.empty());
  CHECK(p.cfg.access_token == "from-flag");
  CHECK(p.cfg.access_token_source == "--access-token");
  CHECK(has_warning(p.cfg, "--access-token-file ignored"));

  p = parse({"--access-token-file", file.path.c_str()}, all_env);
  REQUIRE(p.error.empty());
  CHECK(p.cfg.access_token == "from-file");
  CHECK(p.cfg.access_token_source == "--access-token-file");

  p = parse({}, all_env);
  REQUIRE(p.error.empty());
  CHECK(p.cfg.access_token == "from-env");
  CHECK(p.cfg.access_token_source == "EXECD_ACCESS_TOKEN");

  p = parse({}, {{"EXECD_ACCESS_TOKEN", ""}, {"EXECD_ACCESS_TOKEN_FILE", env_file.path}});
  REQUIRE(p.error.empty());
  CHECK(p.cfg.access_token == "from-env-file");
  CHECK(p.cfg.access_token_source == "EXECD_ACCESS_TOKEN_FILE");

  SUBCASE("a source that is not selected is never read") {
    p = parse({"--access-token=x", "--access-token-file=/nonexistent/token"},
              {{"EXECD_ACCESS_TOKEN_FILE", "/nonexistent/too"}});
    CHECK(p.error.empty());
    p = parse({}, {{"EXECD_ACCESS_TOKEN", "e"}, {"EXECD_ACCESS_TOKEN_FILE", "/nonexistent/too"}});
    CHECK(p.error.empty());
  }
  SUBCASE("a selected file that is missing or empty is an error without the content") {
    CHECK(parse({"--access-token-file=/nonexistent/token"}).error ==
          "cannot read --access-token-file /nonexistent/token");
    CHECK(parse({}, {{"EXECD_ACCESS_TOKEN_FILE", "/nonexistent/t"}}).error ==
          "cannot read EXECD_ACCESS_TOKEN_FILE /nonexistent/t");
    CHECK(parse({"--access-token-file", empty.path.c_str()}).error.find("is empty") != std::string::npos);
    CHECK(parse({}, {{"EXECD_ACCESS_TOKEN_FILE", empty.path}}).error.find("is empty") != std::string::npos);
    CHECK(parse({"--access-token-file="}).error == "--access-token-file needs a path");
    CHECK(parse({"--access-token="}).error == "--access-token needs a non-empty value");
  }
  SUBCASE("no token: refuse unless --insecure-no-auth") {
    std::string err = parse({}).error;
    CHECK(err.find("no access token") != std::string::npos);
    CHECK(err.find("EXECD_ACCESS_TOKEN_FILE") != std::string::npos);
    p = parse({"--insecure-no-auth"});
    CHECK(p.error.empty());
    CHECK(p.cfg.access_token.empty());
    CHECK(p.cfg.access_token_source.empty());
    err = parse({"--insecure-no-auth"}, {{"EXECD_ACCESS_TOKEN", "secret-value"}}).error;
    CHECK(err.find("--insecure-no-auth given together") != std::string::npos);
    CHECK(err.find("secret-value") == std::string::npos);
  }
}

TEST_CASE("config: Go env fallbacks, a flag wins") {
  Parsed p = parse({"-insecure-no-auth"}, {{"EXECD_API_GRACE_SHUTDOWN", "5s"}});
  CHECK(p.cfg.graceful_shutdown_ms == 5000);
  p = parse({"-insecure-no-auth", "-graceful-shutdown-timeout=2s"}, {{"EXECD_API_GRACE_SHUTDOWN", "5s"}});
  CHECK(p.cfg.graceful_shutdown_ms == 2000);
  CHECK_FALSE(parse({"-insecure-no-auth"}, {{"EXECD_API_GRACE_SHUTDOWN", "soon"}}).error.empty());

  p = parse({"-insecure-no-auth"}, {{"JUPYTER_HOST", "http://j:8888"},
                                    {"JUPYTER_TOKEN", "jsecret"},
                                    {"EXECD_JUPYTER_IDLE_POLL_INTERVAL", "300ms"},
                                    {"EXECD_LOG_FILE", "/var/log/execd.log"}});
  REQUIRE(p.error.empty());
  CHECK(p.cfg.jupyter_host == "http://j:8888");
  CHECK(p.cfg.jupyter_token == "jsecret");
  CHECK(p.cfg.jupyter_idle_poll_interval_ms == 300);
  CHECK(has_warning(p.cfg, "JUPYTER_HOST is set but ignored"));
  CHECK(has_warning(p.cfg, "JUPYTER_TOKEN is set but ignored"));
  CHECK(has_warning(p.cfg, "EXECD_JUPYTER_IDLE_POLL_INTERVAL is set but ignored"));
  CHECK(has_warning(p.cfg, "EXECD_LOG_FILE is set but ignored"));
  for (const auto& w : p.cfg.warnings) CHECK(w.find("jsecret") == std::string::npos);

  p = parse({"-insecure-no-auth", "-jupyter-host=http://flag"}, {{"JUPYTER_HOST", "http://env"}});
  CHECK(p.cfg.jupyter_host == "http://flag");
  CHECK(p.cfg.warnings.size() == 1);  // one warning per setting, not two
}

TEST_CASE("config: unknown flags and bad syntax fail with one line") {
  CHECK(parse({"--no-such-flag"}).error == "unknown flag: --no-such-flag");
  CHECK(parse({"-no-such-flag=1"}).error == "unknown flag: -no-such-flag=1");
  CHECK(parse({"---port=1"}).error == "bad flag syntax: ---port=1");
  CHECK(parse({"-=1"}).error == "bad flag syntax: -=1");
  CHECK(parse({"positional"}).error == "unexpected argument: positional");
  CHECK(parse({"-"}).error == "unexpected argument: -");
  CHECK(parse({"--insecure-no-auth", "--"}).error.empty());  // "--" ends the flags
  CHECK(parse({"--insecure-no-auth", "--", "x"}).error ==
        "unexpected argument: x (an entrypoint after -- needs --init)");
  for (const auto& err : {parse({"--no-such-flag"}).error, parse({"--port=x"}).error})
    CHECK(err.find('\n') == std::string::npos);
}

TEST_CASE("config: execd's own flags still work") {
  Parsed p = parse({"--host", "127.0.0.1", "--log-format=json", "--state-dir=/tmp/s", "--framing", "exact",
                    "--retention=1m", "--log-limit=1024", "--max-body=2048", "--kill-grace=500ms",
                    "--idle-timeout=0", "--pty-replay-bytes=4096", "--init", "--insecure-no-auth"});
  REQUIRE(p.error.empty());
  CHECK(p.cfg.host == "127.0.0.1");
  CHECK(p.cfg.log_format == execd::LogFormat::json);
  CHECK(p.cfg.state_dir == "/tmp/s");
  CHECK(p.cfg.exact_framing);
  CHECK(p.cfg.retention_ms == 60000);
  CHECK(p.cfg.log_limit_bytes == 1024);
  CHECK(p.cfg.max_body_bytes == 2048);
  CHECK(p.cfg.kill_grace_ms == 500);
  CHECK(p.cfg.idle_timeout_ms == 0);
  CHECK(p.cfg.pty_replay_bytes == 4096);
  CHECK(p.cfg.init_mode);
}

TEST_CASE("config: --code-spill-limit") {
  CHECK(parse({"--insecure-no-auth"}).cfg.code_spill_limit_bytes == (int64_t(1) << 30));
  CHECK(parse({"--insecure-no-auth", "--code-spill-limit=0"}).cfg.code_spill_limit_bytes == 0);
  CHECK(parse({"--insecure-no-auth", "--code-spill-limit", "8388608"}).cfg.code_spill_limit_bytes == 8388608);
  CHECK(parse({"--insecure-no-auth", "--code-spill-limit=-1"}).error == "--code-spill-limit needs a byte count");
  CHECK(parse({"--insecure-no-auth", "--code-spill-limit"}).error.find("code-spill-limit") != std::string::npos);
}

TEST_CASE("config: state dir, journal and stdin flags") {
  Parsed d = parse({"--insecure-no-auth"});
  REQUIRE(d.error.empty());
  CHECK(d.cfg.state_dir.empty());  // main picks execd::kDefaultStateDir
  CHECK_FALSE(d.cfg.state_dir_given);
  CHECK(std::string(execd::kDefaultStateDir) == "/var/lib/execd");
  CHECK(d.cfg.journal);
  CHECK(d.cfg.journal_max_bytes == 16ll << 20);
  CHECK(d.cfg.stdin_timeout_ms == 30000);
  Parsed p = parse({"--insecure-no-auth", "--state-dir", "/tmp/x", "--no-journal", "--journal-max-bytes=8192",
                    "--stdin-timeout", "1.5s"});
  REQUIRE(p.error.empty());
  CHECK(p.cfg.state_dir_given);
  CHECK_FALSE(p.cfg.journal);
  CHECK(p.cfg.journal_max_bytes == 8192);
  CHECK(p.cfg.stdin_timeout_ms == 1500);
  CHECK_FALSE(parse({"--insecure-no-auth", "--journal-max-bytes", "10"}).error.empty());
  CHECK_FALSE(parse({"--insecure-no-auth", "--stdin-timeout", "soon"}).error.empty());
  CHECK_FALSE(parse({"--insecure-no-auth", "--no-journal=maybe"}).error.empty());
}

TEST_CASE("config: --vsock-port and --no-tcp") {
  Parsed d = parse({"--insecure-no-auth"});
  REQUIRE(d.error.empty());
  CHECK(d.cfg.vsock_port == 0);  // no vsock listener by default
  CHECK(d.cfg.tcp);
  for (auto [text, value] : std::vector<std::pair<const char*, uint32_t>>{
           {"--vsock-port=1024", 1024u}, {"-vsock-port=1", 1u}, {"--vsock-port=0x400", 1024u},
           {"--vsock-port=4294967294", 4294967294u}}) {
    CAPTURE(text);
    Parsed p = parse({text, "--insecure-no-auth"});
    REQUIRE(p.error.empty());
    CHECK(p.cfg.vsock_port == value);
    CHECK(p.cfg.tcp);  // next to TCP unless --no-tcp
  }
  Parsed sep = parse({"--vsock-port", "5000", "--insecure-no-auth"});
  CHECK(sep.cfg.vsock_port == 5000u);
  // 0 would be "none" and 0xFFFFFFFF is VMADDR_PORT_ANY: neither is a port to listen on.
  for (const char* bad : {"--vsock-port=0", "--vsock-port=4294967295", "--vsock-port=-1", "--vsock-port=x",
                          "--vsock-port=", "--vsock-port=99999999999"}) {
    CAPTURE(bad);
    CHECK(parse({bad, "--insecure-no-auth"}).error == "--vsock-port needs a number between 1 and 4294967294");
  }
  CHECK(parse({"--insecure-no-auth", "--vsock-port"}).error.find("--vsock-port") != std::string::npos);
  Parsed only = parse({"--insecure-no-auth", "--vsock-port=1024", "--no-tcp"});
  REQUIRE(only.error.empty());
  CHECK_FALSE(only.cfg.tcp);
  CHECK(parse({"--insecure-no-auth", "--vsock-port=1024", "--no-tcp=false"}).cfg.tcp);
  CHECK(parse({"--insecure-no-auth", "--no-tcp"}).error == "--no-tcp needs --vsock-port (execd would listen nowhere)");
  CHECK_FALSE(parse({"--insecure-no-auth", "--vsock-port=1", "--no-tcp=maybe"}).error.empty());
}

TEST_CASE("config: --init with an entrypoint, EXECD_INIT, --runtime-init") {
  Parsed p = parse({"--insecure-no-auth", "--init", "--", "sh", "-c", "echo --port 1"});
  REQUIRE(p.error.empty());
  CHECK(p.cfg.init_mode);
  CHECK(p.cfg.entrypoint == std::vector<std::string>{"sh", "-c", "echo --port 1"});  // flags end at --
  CHECK(p.cfg.port == 44772);
  p = parse({"--insecure-no-auth", "--", "server"}, {{"EXECD_INIT", "1"}});
  REQUIRE(p.error.empty());
  CHECK(p.cfg.init_mode);
  CHECK(p.cfg.entrypoint.size() == 1);
  p = parse({"--insecure-no-auth"}, {{"EXECD_INIT", "false"}});
  CHECK(!p.cfg.init_mode);
  // A warm execd may start without a token (POST /init brings its hash).
  p = parse({"--runtime-init"});
  REQUIRE(p.error.empty());
  CHECK(p.cfg.runtime_init);
  CHECK(!parse({}).error.empty());
}

TEST_CASE("config: EXECD_RUNTIME_INIT is read as Go's strconv.ParseBool, and the flag wins") {
  // OpenSandbox pkg/flag/parser.go @33b299af: anything but these is fatal.
  for (const char* on : {"1", "t", "T", "TRUE", "true", "True"}) {
    Parsed p = parse({}, {{"EXECD_RUNTIME_INIT", on}});
    REQUIRE_MESSAGE(p.error.empty(), on);
    CHECK(p.cfg.runtime_init);
  }
  for (const char* off : {"0", "f", "F", "FALSE", "false", "False"}) {
    Parsed p = parse({"--insecure-no-auth"}, {{"EXECD_RUNTIME_INIT", off}});
    REQUIRE_MESSAGE(p.error.empty(), off);
    CHECK(!p.cfg.runtime_init);
  }
  for (const char* bad : {"yes", "on", "2", "tRUE"}) {
    Parsed p = parse({"--insecure-no-auth"}, {{"EXECD_RUNTIME_INIT", bad}});
    CHECK_MESSAGE(p.error.find("EXECD_RUNTIME_INIT") != std::string::npos, bad);
  }
  Parsed p = parse({"--insecure-no-auth", "--runtime-init=false"}, {{"EXECD_RUNTIME_INIT", "true"}});
  REQUIRE(p.error.empty());
  CHECK(!p.cfg.runtime_init);
  p = parse({"--runtime-init"}, {{"EXECD_RUNTIME_INIT", "false"}});
  REQUIRE(p.error.empty());
  CHECK(p.cfg.runtime_init);
}

TEST_CASE("config: the E2B listeners from the environment, a flag wins, loopback without a token") {
  Parsed p = parse({"-insecure-no-auth"}, {{"EXECD_ENVD_PORT", "49983"}, {"EXECD_CODE_INTERPRETER_PORT", "49999"}});
  REQUIRE(p.error.empty());
  CHECK(p.cfg.envd_port == 49983);
  CHECK(p.cfg.code_interpreter_port == 49999);
  CHECK(p.cfg.envd_host == "127.0.0.1");
  p = parse({"-insecure-no-auth", "--envd-port", "1234"}, {{"EXECD_ENVD_PORT", "49983"}});
  REQUIRE(p.error.empty());
  CHECK(p.cfg.envd_port == 1234);
  CHECK(p.cfg.code_interpreter_port == -1);
  CHECK_FALSE(parse({"-insecure-no-auth"}, {{"EXECD_ENVD_PORT", "port"}}).error.empty());
  // Without an envd token the listener may not leave loopback, however it was asked for.
  CHECK_FALSE(
      parse({"-insecure-no-auth", "--envd-host", "0.0.0.0"}, {{"EXECD_ENVD_PORT", "49983"}}).error.empty());
  p = parse({"-insecure-no-auth", "--host", "0.0.0.0"},
            {{"EXECD_ENVD_PORT", "49983"}, {"EXECD_ENVD_ACCESS_TOKEN", "t"}});
  REQUIRE(p.error.empty());
  CHECK(p.cfg.envd_host == "0.0.0.0");
  CHECK(p.cfg.envd_access_token == "t");
}

TEST_CASE("config: isolation and hardening flags") {
  Parsed p = parse({"--insecure-no-auth"});
  CHECK(p.cfg.isolation);
  CHECK_FALSE((p.cfg.drop_caps || p.cfg.no_new_privs || p.cfg.seccomp || p.cfg.landlock));
  CHECK(p.cfg.max_isolated_sessions == 16);
  p = parse({"--insecure-no-auth", "--no-isolation", "--drop-caps", "--no-new-privs", "--seccomp", "--landlock",
             "--landlock-writable", "/a:/b/", "--isolated-allowed-paths=/x", "--max-isolated-sessions", "3"});
  CHECK(p.error == "");
  CHECK_FALSE(p.cfg.isolation);
  CHECK((p.cfg.drop_caps && p.cfg.no_new_privs && p.cfg.seccomp && p.cfg.landlock));
  CHECK(p.cfg.landlock_writable == std::vector<std::string>{"/a", "/b"});
  CHECK(p.cfg.isolated_allowed_paths == std::vector<std::string>{"/x"});
  CHECK(p.cfg.max_isolated_sessions == 3);
  CHECK(parse({"--insecure-no-auth", "--landlock-writable", "rel:/b"}).error.find("absolute") != std::string::npos);
  CHECK(parse({"--insecure-no-auth", "--landlock-writable", "/a::/b"}).error != "");
  p = parse({"--insecure-no-auth", "--isolation-config", "/etc/x.toml"});
  CHECK(p.error == "");
  CHECK(has_warning(p.cfg, "--isolation-config"));
  p = parse({"--insecure-no-auth"}, {{"EXECD_ISOLATION_CONFIG", "/etc/x.toml"}});
  CHECK(has_warning(p.cfg, "EXECD_ISOLATION_CONFIG"));
}

TEST_CASE("config: the isolated root view, and the files sessions never see") {
  Parsed p = parse({"--insecure-no-auth"});
  using Choice = Config::RootViewChoice;
  CHECK(p.cfg.isolated_root_view == Choice::automatic);
  CHECK(p.cfg.secret_files.empty());
  const std::pair<const char*, Choice> choices[] = {
      {"auto", Choice::automatic}, {"idmapped", Choice::idmapped}, {"masked", Choice::masked}};
  for (const auto& [name, choice] : choices) {
    p = parse({"--insecure-no-auth", "--isolated-root-view", name});
    CHECK(p.error == "");
    CHECK(p.cfg.isolated_root_view == choice);
  }
  CHECK(parse({"--insecure-no-auth", "--isolated-root-view", "open"}).error.find("auto, idmapped or masked") !=
        std::string::npos);
  CHECK(parse({"--insecure-no-auth", "--isolated-root-view"}).error != "");
  // Every file named for a token, the one read and the ones that lost.
  char path[] = "/tmp/execd-secret-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, "tok\n", 4) == 4);
  close(fd);
  p = parse({"--access-token", "a", "--access-token-file", path, "--envd-access-token-file", path},
            {{"EXECD_ACCESS_TOKEN_FILE", "/env/token"}, {"EXECD_ENVD_ACCESS_TOKEN_FILE", "/env/envd"}});
  CHECK(p.error == "");
  CHECK(p.cfg.access_token == "a");
  CHECK(p.cfg.secret_files == std::vector<std::string>{path, path, "/env/token", "/env/envd"});
  unlink(path);
}

TEST_CASE("config: --max-records is a count from 1, default 4096; --cold-after a duration, default 10s") {
  CHECK(parse({"--insecure-no-auth"}).cfg.max_records == 4096);
  CHECK(parse({"--max-records", "3", "--insecure-no-auth"}).cfg.max_records == 3);
  CHECK_FALSE(parse({"--max-records", "0", "--insecure-no-auth"}).error.empty());
  CHECK_FALSE(parse({"--max-records", "x", "--insecure-no-auth"}).error.empty());
  CHECK(parse({"--insecure-no-auth"}).cfg.cold_after_ms == 10000);
  CHECK(parse({"--cold-after", "0s", "--insecure-no-auth"}).cfg.cold_after_ms == 0);
  CHECK(parse({"--cold-after=2m", "--insecure-no-auth"}).cfg.cold_after_ms == 120000);
  CHECK(parse({"--cold-after", "-1s", "--insecure-no-auth"}).error.find("--cold-after") != std::string::npos);
}

TEST_CASE("config: --cgroup-spares is a count from 0 to 64, default 2") {
  CHECK(parse({"--insecure-no-auth"}).cfg.cgroup_spares == 2);
  CHECK(parse({"--cgroup-spares", "0", "--insecure-no-auth"}).cfg.cgroup_spares == 0);
  CHECK(parse({"--cgroup-spares=64", "--insecure-no-auth"}).cfg.cgroup_spares == 64);
  for (const char* bad : {"--cgroup-spares=65", "--cgroup-spares=-1", "--cgroup-spares=x"})
    CHECK(parse({bad, "--insecure-no-auth"}).error.find("--cgroup-spares") != std::string::npos);
}

TEST_CASE("config: every default --help shows is a value its flag takes back unchanged") {
  // --help and docs/command-line.md print these defaults: one written in a
  // form its own flag refuses or reads differently (a duration's units, a
  // range that leaves it out) would mislead whoever copies it.
  Parsed baseline = parse({"--insecure-no-auth"});
  REQUIRE(baseline.error.empty());
  int checked = 0;
  for (const auto& group : execd::config_flags::flag_table()) {
    for (const auto& flag : group.flags) {
      if (flag.name.empty() || !flag.reader.takes_value || !flag.default_text.empty()) continue;
      std::string shown = execd::config_flags::default_of(flag);
      if (shown.empty()) continue;
      CAPTURE(flag.name);
      CAPTURE(shown);
      std::string arg = "--" + flag.name + "=" + shown;
      Parsed p = parse({arg.c_str(), "--insecure-no-auth"});
      REQUIRE(p.error.empty());
      p.cfg.warnings = baseline.cfg.warnings;  // an ignored Go flag warns that it was given
      CHECK(p.cfg == baseline.cfg);
      ++checked;
    }
  }
  CHECK(checked > 50);  // the loop did not skip the table
}

TEST_CASE("config: every flag --help and the reference name is one execd takes") {
  // Help texts refer to other flags ("needs --vsock-port"); a renamed or
  // misspelt one would send the reader to a flag that does not exist.
  for (const std::string& text : {execd::usage_text(), execd::usage_markdown()}) {
    for (size_t at = text.find("--"); at != std::string::npos; at = text.find("--", at + 2)) {
      size_t end = at + 2;
      while (end < text.size() && (isalnum(static_cast<unsigned char>(text[end])) || text[end] == '-')) ++end;
      std::string name = text.substr(at + 2, end - at - 2);
      // "--" itself (which ends the flags) and markdown's "| --- |" name no flag.
      if (name.empty() || !islower(static_cast<unsigned char>(name[0]))) continue;
      CAPTURE(name);
      CHECK(execd::config_flags::find_flag(name) != nullptr);
      at = end - 2;
    }
  }
}

TEST_CASE("config: every flag that takes a token hides it from commands") {
  // execd/secrets blanks and withholds what the table marks: a token flag
  // added without the mark would be readable in /proc/<execd>/cmdline.
  int tokens = 0;
  for (const auto& group : execd::config_flags::flag_table())
    for (const auto& flag : group.flags)
      if (flag.value_name == "TOKEN") {
        CAPTURE(flag.name);
        CHECK(flag.secrecy == execd::config_flags::Secrecy::token);
        CHECK_FALSE(flag.env.empty());  // and its variable, if set, is withheld too
        ++tokens;
      }
  CHECK(tokens == 3);  // --access-token, --envd-access-token, --jupyter-token
}
