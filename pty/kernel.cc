// pty/kernel: see header.
#include "pty/kernel.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <simdjson.h>

#include <nlohmann/json.hpp>
#include <set>

#include "pty/spawn.h"
#include "fs/small_file.h"
#include "protocol/sha.h"

namespace execd::pty {

namespace {

const char* lookup(const std::vector<std::string>& env, std::string_view name) {
  for (const auto& kv : env)
    if (kv.size() > name.size() && kv[name.size()] == '=' && kv.compare(0, name.size(), name) == 0)
      return kv.c_str() + name.size() + 1;
  return nullptr;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

std::vector<std::string> jupyter_data_dirs(const std::vector<std::string>& env) {
  std::vector<std::string> dirs;
  auto add = [&](std::string d) {
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    if (!d.empty() && std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.push_back(std::move(d));
  };
  if (const char* jp = lookup(env, "JUPYTER_PATH")) {
    std::string s = jp;
    size_t start = 0;
    while (start <= s.size()) {
      size_t colon = s.find(':', start);
      if (colon == std::string::npos) colon = s.size();
      if (colon > start) add(s.substr(start, colon - start));
      start = colon + 1;
    }
  }
  if (const char* d = lookup(env, "JUPYTER_DATA_DIR"); d && *d) {
    add(d);
  } else if (const char* x = lookup(env, "XDG_DATA_HOME"); x && *x) {
    add(std::string(x) + "/jupyter");
  } else if (const char* home = lookup(env, "HOME"); home && *home) {
    add(std::string(home) + "/.local/share/jupyter");
  }
  if (const char* v = lookup(env, "VIRTUAL_ENV"); v && *v) add(std::string(v) + "/share/jupyter");
  if (const char* c = lookup(env, "CONDA_PREFIX"); c && *c) add(std::string(c) + "/share/jupyter");
  add("/usr/local/share/jupyter");
  add("/usr/share/jupyter");
  return dirs;
}

bool parse_kernelspec(const std::string& name, const std::string& dir, const std::string& text, KernelSpec& out,
                      std::string& error) {
  simdjson::dom::parser parser;
  simdjson::dom::object j;
  if (parser.parse(text).get(j)) {
    error = "kernel.json is not a JSON object";
    return false;
  }
  simdjson::dom::array argv;
  if (j["argv"].get(argv) || argv.size() == 0) {
    error = "kernel.json has no argv";
    return false;
  }
  out = KernelSpec{};
  out.name = name;
  out.dir = dir;
  for (simdjson::dom::element a : argv) {
    std::string_view v;
    if (a.get(v)) {
      error = "kernel.json argv holds a non-string";
      return false;
    }
    out.argv.emplace_back(v);
  }
  std::string_view v;
  if (!j["language"].get(v)) out.language = std::string(v);
  if (!j["display_name"].get(v)) out.display_name = std::string(v);
  if (!j["interrupt_mode"].get(v)) out.interrupt_by_message = v == "message";
  simdjson::dom::object env;
  if (!j["env"].get(env))
    for (auto field : env)
      if (!field.value.get(v)) out.env.emplace_back(std::string(field.key), std::string(v));
  return true;
}

std::vector<KernelSpec> find_kernelspecs(const std::vector<std::string>& env) {
  std::vector<KernelSpec> specs;
  std::set<std::string> seen;
  for (const auto& data_dir : jupyter_data_dirs(env)) {
    std::string kernels = data_dir + "/kernels";
    DIR* d = opendir(kernels.c_str());
    if (!d) continue;
    std::vector<std::string> names;
    while (struct dirent* e = readdir(d))
      if (e->d_name[0] != '.') names.emplace_back(e->d_name);
    closedir(d);
    std::sort(names.begin(), names.end());
    for (const auto& name : names) {
      std::string dir = kernels + "/" + name;
      if (seen.count(lower(name))) continue;
      std::optional<std::string> text = fs::read_small_file(dir + "/kernel.json", 1 << 20);
      std::string error;
      KernelSpec spec;
      if (!text || !parse_kernelspec(name, dir, *text, spec, error)) continue;
      seen.insert(lower(name));
      specs.push_back(std::move(spec));
    }
  }
  return specs;
}

const KernelSpec* pick_kernelspec(const std::vector<KernelSpec>& specs, const std::string& language) {
  std::string want = lower(language);
  for (const auto& s : specs)
    if (lower(s.name) == want) return &s;
  if (want == "python")
    for (const auto& s : specs)
      if (lower(s.name) == "python3") return &s;
  for (const auto& s : specs)
    if (lower(s.language) == want) return &s;
  return nullptr;
}

std::string KernelConnection::to_json(const std::string& kernel_name) const {
  nlohmann::ordered_json j;
  j["shell_port"] = shell_port;
  j["iopub_port"] = iopub_port;
  j["stdin_port"] = stdin_port;
  j["control_port"] = control_port;
  j["hb_port"] = hb_port;
  j["ip"] = ip;
  j["key"] = key;
  j["transport"] = transport;
  j["signature_scheme"] = "hmac-sha256";
  j["kernel_name"] = kernel_name;
  return j.dump(1);
}

void KernelConnection::remove_sockets() const {
  if (transport != "ipc") return;
  for (int p : {shell_port, iopub_port, stdin_port, control_port, hb_port}) unlink((ip + "-" + std::to_string(p)).c_str());
}

namespace {

bool new_key(std::string& key, std::string& error) {
  unsigned char raw[32];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  bool got = fd >= 0 && read(fd, raw, sizeof raw) == static_cast<ssize_t>(sizeof raw);
  if (fd >= 0) close(fd);
  if (!got) {
    error = "cannot read /dev/urandom for the kernel key";
    return false;
  }
  key = protocol::lower_hex(raw, sizeof raw);
  return true;
}

}  // namespace

bool allocate_connection(KernelConnection& c, const std::string& ipc_prefix, std::string& error) {
  if (!new_key(c.key, error)) return false;
  if (!ipc_prefix.empty() && ipc_prefix.size() + 3 < sizeof(sockaddr_un::sun_path)) {
    c.transport = "ipc";
    c.ip = ipc_prefix;
    c.shell_port = 1, c.iopub_port = 2, c.stdin_port = 3, c.control_port = 4, c.hb_port = 5;
    c.remove_sockets();
    return true;
  }
  c.transport = "tcp";
  c.ip = "127.0.0.1";
  int fds[5];
  int* ports[5] = {&c.shell_port, &c.iopub_port, &c.stdin_port, &c.control_port, &c.hb_port};
  int opened = 0;
  bool ok = true;
  for (; opened < 5 && ok; ++opened) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    fds[opened] = fd;
    struct sockaddr_in a {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      error = std::string("cannot pick a loopback port: ") + strerror(errno);
      ok = false;
    } else {
      *ports[opened] = ntohs(a.sin_port);
    }
  }
  for (int i = 0; i < opened; ++i)
    if (fds[i] >= 0) close(fds[i]);
  return ok;
}

bool write_connection_file(const std::string& path, const std::string& contents, std::string& error) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    error = "cannot write connection file " + path + ": " + strerror(errno);
    return false;
  }
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n <= 0) {
      error = "cannot write connection file " + path + ": " + strerror(errno);
      close(fd);
      return false;
    }
    done += static_cast<size_t>(n);
  }
  close(fd);
  return true;
}

bool kernel_spawn_options(const KernelSpec& spec, const std::string& connection_file,
                          const std::vector<std::string>& base_env, const std::string& cwd, SpawnOptions& out,
                          std::string& error) {
  out = SpawnOptions{};
  for (std::string a : spec.argv) {
    for (size_t at; (at = a.find("{connection_file}")) != std::string::npos;)
      a.replace(at, strlen("{connection_file}"), connection_file);
    for (size_t at; (at = a.find("{resource_dir}")) != std::string::npos;)
      a.replace(at, strlen("{resource_dir}"), spec.dir);
    out.argv.push_back(std::move(a));
  }
  const std::string& prog = out.argv[0];
  out.program = prog.find('/') != std::string::npos ? prog : find_in_path(prog);
  if (out.program.empty()) {
    error = "kernel " + spec.name + ": " + prog + " not found on PATH";
    return false;
  }
  out.env = base_env;
  for (const auto& [k, v] : spec.env) set_env(out.env, k, v);
  // Kernels render for a notebook frontend by default; plain text here.
  set_env(out.env, "PYDEVD_DISABLE_FILE_VALIDATION", "1");
  out.cwd = cwd;
  return true;
}

}  // namespace execd::pty
