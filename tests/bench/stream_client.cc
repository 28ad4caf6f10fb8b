// tests/bench/stream_client: a fast client for the throughput benchmark, so
// that the client is not what is measured. Runs one command through
// POST /command in exact framing, decodes every stdout/stderr event (text or
// b64), checks offsets, hashes stdout with SHA-256 and compares the byte
// count and digest with the terminal event's structured result.
//
//   stream_client PORT TOKEN COMMAND  ->  {"ok":true,"stdout_bytes":N,"seconds":S}
//
// With --rtt N it instead runs POST /command {"command":"true"} N times over
// one keep-alive connection and prints the latency percentiles (a client
// with next to no cost of its own, for the round-trip benchmark):
//   stream_client --rtt N PORT TOKEN  ->  {"p50_us":...,"p99_us":...,"errors":E}
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <vector>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <simdjson.h>
#include <string>

namespace {

std::string json_quote(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}

std::string hex(const unsigned char* d, size_t n) {
  static const char* k = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += k[d[i] >> 4];
    s += k[d[i] & 15];
  }
  return s;
}

[[noreturn]] void die(const char* what) {
  fprintf(stderr, "stream_client: %s\n", what);
  exit(1);
}

}  // namespace

int connect_loopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("connect");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// One keep-alive connection, N sequential `true` commands; a response ends
// with the last chunk after the terminal event.
int rtt(int n, int port, const std::string& token) {
  std::string body = "{\"command\":\"true\"}";
  std::string req = "POST /command HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nX-EXECD-ACCESS-TOKEN: " +
                    token + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  int fd = connect_loopback(port);
  std::vector<double> us;
  int errors = 0;
  std::string buf(65536, '\0');
  for (int i = 0; i < n + 20; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) die("write");
    std::string got;
    while (got.size() < 5 || got.compare(got.size() - 5, 5, "0\r\n\r\n") != 0) {
      ssize_t r = read(fd, buf.data(), buf.size());
      if (r <= 0) die("read");
      got.append(buf.data(), static_cast<size_t>(r));
    }
    double dt = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (got.find("\"execution_complete\"") == std::string::npos) ++errors;
    if (i >= 20) us.push_back(dt);  // warm-up
  }
  std::sort(us.begin(), us.end());
  printf("{\"p50_us\":%.1f,\"p99_us\":%.1f,\"errors\":%d}\n", us[us.size() / 2], us[us.size() * 99 / 100], errors);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--rtt") return rtt(atoi(argv[2]), atoi(argv[3]), argv[4]);
  if (argc != 4) die("usage: stream_client PORT TOKEN COMMAND | stream_client --rtt N PORT TOKEN");
  int port = atoi(argv[1]);
  std::string body = "{\"command\":" + json_quote(argv[3]) + "}";
  std::string req = "POST /command HTTP/1.1\r\nHost: bench\r\nConnection: close\r\nAccept: application/x-ndjson\r\n"
                    "Content-Type: application/json\r\nX-EXECD-ACCESS-TOKEN: " +
                    std::string(argv[2]) + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  int fd = connect_loopback(port);
  auto t0 = std::chrono::steady_clock::now();
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) die("write");

  SHA256_CTX sha;
  SHA256_Init(&sha);
  uint64_t out_bytes = 0, err_bytes = 0;
  std::string raw, lines, decoded;
  bool head_done = false, done = false, got_terminal = false, ok = false;
  size_t chunk_left = 0;
  bool in_chunk_trailer = false;
  simdjson::dom::parser parser;
  std::string buf(1 << 20, '\0');
  std::string expect_sha;
  uint64_t expect_bytes = UINT64_MAX;

  auto handle_line = [&](std::string_view line) {
    if (line.empty()) return;
    simdjson::dom::element ev;
    if (parser.parse(line.data(), line.size(), true).get(ev)) die("bad json line");
    std::string_view type = ev["type"].get_string().value_unsafe();
    if (type == "stdout" || type == "stderr") {
      bool is_out = type == "stdout";
      uint64_t offset = ev["offset"].get_uint64().value_unsafe();
      if (offset != (is_out ? out_bytes : err_bytes)) die("offset gap");
      std::string_view text;
      size_t n;
      if (!ev["text"].get_string().get(text)) {
        if (is_out) SHA256_Update(&sha, text.data(), text.size());
        n = text.size();
      } else {
        std::string_view b64 = ev["b64"].get_string().value_unsafe();
        decoded.resize(b64.size());
        int len = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(decoded.data()),
                                  reinterpret_cast<const unsigned char*>(b64.data()), static_cast<int>(b64.size()));
        if (len < 0) die("bad b64");
        size_t pad = 0;
        for (size_t i = b64.size(); i > 0 && b64[i - 1] == '='; --i) ++pad;
        n = static_cast<size_t>(len) - pad;
        if (is_out) SHA256_Update(&sha, decoded.data(), n);
      }
      (is_out ? out_bytes : err_bytes) += n;
    } else if (type == "execution_complete" || type == "error") {
      expect_bytes = ev["stdout_bytes"].get_uint64().value_unsafe();
      expect_sha = std::string(ev["stdout_sha256"].get_string().value_unsafe());
      got_terminal = true;
    }
  };

  while (!done) {
    ssize_t n = read(fd, buf.data(), buf.size());
    if (n <= 0) break;
    raw.append(buf.data(), static_cast<size_t>(n));
    size_t pos = 0;
    if (!head_done) {
      size_t e = raw.find("\r\n\r\n");
      if (e == std::string::npos) continue;
      if (raw.compare(0, 12, "HTTP/1.1 200") != 0) die("not 200");
      head_done = true;
      pos = e + 4;
    }
    // de-chunk
    while (pos < raw.size()) {
      if (in_chunk_trailer) {
        if (raw.size() - pos < 2) break;
        pos += 2;
        in_chunk_trailer = false;
        continue;
      }
      if (chunk_left == 0) {
        size_t e = raw.find("\r\n", pos);
        if (e == std::string::npos) break;
        chunk_left = strtoull(raw.c_str() + pos, nullptr, 16);
        pos = e + 2;
        if (chunk_left == 0) {
          done = true;
          break;
        }
        continue;
      }
      size_t take = std::min(chunk_left, raw.size() - pos);
      lines.append(raw, pos, take);
      pos += take;
      chunk_left -= take;
      if (chunk_left == 0) in_chunk_trailer = true;
    }
    raw.erase(0, pos);
    size_t start = 0, nl;
    while ((nl = lines.find('\n', start)) != std::string::npos) {
      handle_line(std::string_view(lines).substr(start, nl - start));
      start = nl + 1;
    }
    lines.erase(0, start);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  unsigned char md[32];
  SHA256_Final(md, &sha);
  ok = got_terminal && expect_bytes == out_bytes && hex(md, 32) == expect_sha;
  printf("{\"ok\":%s,\"stdout_bytes\":%llu,\"seconds\":%.6f}\n", ok ? "true" : "false",
         static_cast<unsigned long long>(out_bytes), secs);
  return ok ? 0 : 1;
}
