// pty/kernel: what it takes to start a Jupyter kernel process, without
// speaking to it: finding installed kernelspecs, choosing one for a language,
// the connection file (loopback TCP ports, the signing key), and the spawn
// options built from kernel.json's argv and env. The process itself runs as a
// pty::Command (own process group, reaped by execd's Reaper); the ZMTP
// channels to it live in execd/kernel_channels.
//
// Kernelspecs are searched, first hit per name wins, in: every entry of
// JUPYTER_PATH, JUPYTER_DATA_DIR (else $XDG_DATA_HOME/jupyter, else
// ~/.local/share/jupyter), $VIRTUAL_ENV/share/jupyter, $CONDA_PREFIX/share/jupyter,
// /usr/local/share/jupyter and /usr/share/jupyter, each with kernels/<name>/kernel.json.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "pty/spawn.h"

namespace execd::pty {

struct KernelSpec {
  std::string name;      // directory name: "python3", "bash"
  std::string language;  // kernel.json "language"
  std::string display_name;
  std::string dir;
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;
  bool interrupt_by_message = false;  // interrupt_mode "message" (default "signal")
};

// The data directories searched, in order, given the environment execd runs
// commands with ("K=V" strings).
std::vector<std::string> jupyter_data_dirs(const std::vector<std::string>& env);

// Parses one kernel.json; false with `error` on malformed JSON or a missing argv.
bool parse_kernelspec(const std::string& name, const std::string& dir, const std::string& json_text, KernelSpec& out,
                      std::string& error);

// All kernelspecs found (blocking file reads: call off the loop, or rarely).
std::vector<KernelSpec> find_kernelspecs(const std::vector<std::string>& env);

// The spec for `language`: the kernelspec of that name; `python` means
// `python3`; else the first whose language matches (case-insensitively).
const KernelSpec* pick_kernelspec(const std::vector<KernelSpec>& specs, const std::string& language);

struct KernelConnection {
  std::string transport = "tcp";
  std::string ip = "127.0.0.1";  // ipc: the socket path prefix
  std::string key;  // HMAC-SHA256 key (hex from the CSPRNG)
  int shell_port = 0, iopub_port = 0, stdin_port = 0, control_port = 0, hb_port = 0;

  std::string endpoint(int port) const {
    return transport == "ipc" ? "ipc://" + ip + "-" + std::to_string(port) : "tcp://" + ip + ":" + std::to_string(port);
  }
  // ipc: removes the five socket files.
  void remove_sockets() const;
  std::string to_json(const std::string& kernel_name) const;
};

// A fresh key and the five endpoints: Unix sockets `ipc_prefix`-1..5 when the
// prefix is short enough for sun_path (no port can be taken by someone else
// between choosing and binding, which bites with many kernels starting at
// once); else five free loopback TCP ports (bind to 0, read, close).
bool allocate_connection(KernelConnection& c, const std::string& ipc_prefix, std::string& error);

// Writes the connection file with mode 0600.
bool write_connection_file(const std::string& path, const std::string& contents, std::string& error);

// argv with {connection_file} substituted and argv[0] resolved on PATH;
// env = `base_env` plus the spec's env; cwd as given.
bool kernel_spawn_options(const KernelSpec& spec, const std::string& connection_file,
                          const std::vector<std::string>& base_env, const std::string& cwd, SpawnOptions& out,
                          std::string& error);

}  // namespace execd::pty
