// Unit tests for pty/kernel: kernel.json parsing, choosing a spec for a
// language (python -> python3), the search path order and the spawn argv.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "pty/kernel.h"

using namespace execd::pty;

TEST_CASE("kernelspec: parse, pick and search order") {
  KernelSpec py, bash;
  std::string err;
  REQUIRE(parse_kernelspec("python3", "/k/python3",
                           R"({"argv":["/usr/bin/python3","-m","ipykernel_launcher","-f","{connection_file}"],
                               "language":"python","display_name":"Python 3","env":{"A":"1"}})",
                           py, err));
  CHECK(py.argv.size() == 5);
  CHECK_FALSE(py.interrupt_by_message);
  CHECK(py.env.size() == 1);
  REQUIRE(parse_kernelspec("bash", "/k/bash", R"({"argv":["bash_kernel"],"language":"bash","interrupt_mode":"message"})",
                           bash, err));
  CHECK(bash.interrupt_by_message);
  KernelSpec bad;
  CHECK_FALSE(parse_kernelspec("x", "/k/x", R"({"language":"x"})", bad, err));
  CHECK_FALSE(parse_kernelspec("x", "/k/x", "[1]", bad, err));

  std::vector<KernelSpec> specs{py, bash};
  CHECK(pick_kernelspec(specs, "python")->name == "python3");
  CHECK(pick_kernelspec(specs, "Python3")->name == "python3");
  CHECK(pick_kernelspec(specs, "bash")->name == "bash");
  CHECK(pick_kernelspec(specs, "cobol") == nullptr);

  auto dirs = jupyter_data_dirs({"JUPYTER_PATH=/a:/b/", "HOME=/home/u", "VIRTUAL_ENV=/venv"});
  std::vector<std::string> want{"/a", "/b", "/home/u/.local/share/jupyter", "/venv/share/jupyter",
                                "/usr/local/share/jupyter", "/usr/share/jupyter"};
  CHECK(dirs == want);

  SpawnOptions opts;
  REQUIRE(kernel_spawn_options(py, "/s/kernel-1.json", {"PATH=/usr/bin"}, "/w", opts, err));
  CHECK(opts.argv.back() == "/s/kernel-1.json");
  CHECK(opts.program == "/usr/bin/python3");
  CHECK(opts.cwd == "/w");
}

TEST_CASE("kernelspec: connection endpoints") {
  KernelConnection c;
  std::string err;
  REQUIRE(allocate_connection(c, "/tmp/k-abc", err));
  CHECK(c.transport == "ipc");
  CHECK(c.endpoint(c.shell_port) == "ipc:///tmp/k-abc-1");
  CHECK(c.key.size() == 64);
  REQUIRE(allocate_connection(c, std::string(200, 'x'), err));
  CHECK(c.transport == "tcp");
  CHECK(c.endpoint(c.hb_port).rfind("tcp://127.0.0.1:", 0) == 0);
  CHECK(c.to_json("python3").find("\"signature_scheme\": \"hmac-sha256\"") != std::string::npos);
}
