// The EXECD_ENVS file format (fs/env_file), including the two forms the
// OpenSandbox 1.1 SDK's commands.set_env appends.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "fs/env_file.h"

using execd::fs::parse_env_file;

namespace {
std::map<std::string, std::string> parse(std::string_view text, std::map<std::string, std::string> env = {}) {
  parse_env_file(
      text,
      [&](std::string_view n) -> const char* {
        auto it = env.find(std::string(n));
        return it == env.end() ? nullptr : it->second.c_str();
      },
      [&](const std::string& k, const std::string& v) { env[k] = v; });
  return env;
}
}  // namespace

TEST_CASE("env file: plain lines, comments, blanks and malformed lines") {
  auto e = parse("# c\n\nA=1\r\n  B = two \nMALFORMED\n=x\nEMPTY=\nexport C=3\n");
  CHECK(e.at("A") == "1");
  CHECK(e.at("B") == " two");  // verbatim after '=' (trailing blanks dropped)
  CHECK(e.at("EMPTY").empty());
  CHECK(e.at("C") == "3");
  CHECK(e.count("MALFORMED") == 0);
  CHECK(e.size() == 4);
}

TEST_CASE("env file: references see execd's environment and earlier entries") {
  auto e = parse("P=$BASE/x\nQ=${P}/y\nU=$UNDEFINED.\n", {{"BASE", "/b"}});
  CHECK(e.at("P") == "/b/x");
  CHECK(e.at("Q") == "/b/x/y");
  CHECK(e.at("U") == ".");
}

TEST_CASE("env file: single quotes are literal, double quotes take escapes") {
  auto e = parse(R"(S='a $HOME "b" \n'
D="it's \"q\" \\ \n\t\$HOME $HOME"
HALF='open
ODD="x\"
)",
                 {{"HOME", "/root"}});
  CHECK(e.at("S") == R"(a $HOME "b" \n)");
  CHECK(e.at("D") == "it's \"q\" \\ \n\t$HOME /root");
  CHECK(e.at("HALF") == "'open");   // unclosed: verbatim
  CHECK(e.at("ODD") == "\"x\\\"");  // the closing quote is escaped: verbatim
  // a later entry wins
  CHECK(parse("K=1\nK='2'\n").at("K") == "2");
}
