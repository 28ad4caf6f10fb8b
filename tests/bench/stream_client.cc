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
//
// With --think N MS it runs them as an agent does: a pause of MS
// milliseconds before each, and a fresh connection each (as an SDK call
// makes), timed from the connect to the last chunk:
//   stream_client --think N MS PORT TOKEN  ->  {"p50_us":...,"p90_us":...,"errors":E}
#include <time.h>
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

std::string true_request(const std::string& token, bool keep_alive) {
  std::string body = "{\"command\":\"true\"}";
  return "POST /command HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nX-EXECD-ACCESS-TOKEN: " + token +
         "\r\nContent-Length: " + std::to_string(body.size()) + (keep_alive ? "" : "\r\nConnection: close") +
         "\r\n\r\n" + body;
}

// Sends `req` on `fd` and reads the response to its last chunk (after the
// terminal event); false if that event was not in it.
bool run_one(int fd, const std::string& req, std::string& buf) {
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) die("write");
  std::string got;
  while (got.size() < 5 || got.compare(got.size() - 5, 5, "0\r\n\r\n") != 0) {
    ssize_t r = read(fd, buf.data(), buf.size());
    if (r <= 0) die("read");
    got.append(buf.data(), static_cast<size_t>(r));
  }
  return got.find("\"execution_complete\"") != std::string::npos;
}

// One keep-alive connection, N sequential `true` commands.
int rtt(int n, int port, const std::string& token) {
  std::string req = true_request(token, true);
  int fd = connect_loopback(port);
  std::vector<double> us;
  int errors = 0;
  std::string buf(65536, '\0');
  for (int i = 0; i < n + 20; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    if (!run_one(fd, req, buf)) ++errors;
    double dt = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 20) us.push_back(dt);  // warm-up
  }
  std::sort(us.begin(), us.end());
  printf("{\"p50_us\":%.1f,\"p99_us\":%.1f,\"errors\":%d}\n", us[us.size() / 2], us[us.size() * 99 / 100], errors);
  return 0;
}

int think(int n, int pause_ms, int port, const std::string& token) {
  std::string req = true_request(token, false);
  std::vector<double> us;
  int errors = 0;
  std::string buf(65536, '\0');
  for (int i = 0; i < n + 3; ++i) {
    struct timespec pause = {pause_ms / 1000, (pause_ms % 1000) * 1000000L};
    nanosleep(&pause, nullptr);
    auto t0 = std::chrono::steady_clock::now();
    int fd = connect_loopback(port);
    if (!run_one(fd, req, buf)) ++errors;
    double dt = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    close(fd);
    if (i >= 3) us.push_back(dt);  // warm-up
  }
  std::sort(us.begin(), us.end());
  printf("{\"p50_us\":%.1f,\"p90_us\":%.1f,\"errors\":%d}\n", us[us.size() / 2], us[us.size() * 9 / 10], errors);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 6 && std::string(argv[1]) == "--think") return think(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), argv[5]);
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
  std::string decoded, carry;
  bool got_terminal = false, ok = false;
  simdjson::dom::parser parser;
  std::string expect_sha;
  uint64_t expect_bytes = UINT64_MAX;

  // Event lines are parsed where they were read: simdjson only needs
  // SIMDJSON_PADDING readable bytes after a line, whatever they hold. A line
  // split across chunks (execd does not split one) goes through `carry`.
  auto handle_line = [&](const char* line, size_t len) {
    if (len == 0) return;
    simdjson::dom::element ev;
    if (parser.parse(line, len, false).get(ev)) die("bad json line");
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
        int dlen = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(decoded.data()),
                                   reinterpret_cast<const unsigned char*>(b64.data()), static_cast<int>(b64.size()));
        if (dlen < 0) die("bad b64");
        size_t pad = 0;
        for (size_t i = b64.size(); i > 0 && b64[i - 1] == '='; --i) ++pad;
        n = static_cast<size_t>(dlen) - pad;
        if (is_out) SHA256_Update(&sha, decoded.data(), n);
      }
      (is_out ? out_bytes : err_bytes) += n;
    } else if (type == "execution_complete" || type == "error") {
      expect_bytes = ev["stdout_bytes"].get_uint64().value_unsafe();
      expect_sha = std::string(ev["stdout_sha256"].get_string().value_unsafe());
      got_terminal = true;
    }
  };
  // The lines of one piece of a chunk's body; an unfinished last line waits
  // in `carry` for the next piece.
  auto handle_body = [&](const char* p, size_t len) {
    const char* end = p + len;
    if (!carry.empty()) {
      const char* nl = static_cast<const char*>(memchr(p, '\n', len));
      if (!nl) {
        carry.append(p, len);
        return;
      }
      carry.append(p, static_cast<size_t>(nl - p));
      carry.reserve(carry.size() + simdjson::SIMDJSON_PADDING);
      handle_line(carry.data(), carry.size());
      carry.clear();
      p = nl + 1;
    }
    while (p < end) {
      const char* nl = static_cast<const char*>(memchr(p, '\n', static_cast<size_t>(end - p)));
      if (!nl) {
        carry.assign(p, static_cast<size_t>(end - p));
        return;
      }
      handle_line(p, static_cast<size_t>(nl - p));
      p = nl + 1;
    }
  };

  constexpr size_t kCap = 4 << 20;
  std::vector<char> buf(kCap + simdjson::SIMDJSON_PADDING);
  size_t len = 0, pos = 0;  // bytes held, bytes consumed
  bool head_done = false, done = false, in_trailer = false;
  size_t chunk_left = 0;
  while (!done) {
    if (len == kCap || (pos > kCap / 2 && len - pos < kCap / 4)) {
      memmove(buf.data(), buf.data() + pos, len - pos);  // a partial chunk header or line at most
      len -= pos;
      pos = 0;
    }
    ssize_t n = read(fd, buf.data() + len, kCap - len);
    if (n <= 0) break;
    len += static_cast<size_t>(n);
    if (!head_done) {
      const char* e = static_cast<const char*>(memmem(buf.data(), len, "\r\n\r\n", 4));
      if (!e) continue;
      if (len < 12 || memcmp(buf.data(), "HTTP/1.1 200", 12) != 0) die("not 200");
      head_done = true;
      pos = static_cast<size_t>(e - buf.data()) + 4;
    }
    while (pos < len && !done) {
      if (in_trailer) {
        if (len - pos < 2) break;
        pos += 2;
        in_trailer = false;
      } else if (chunk_left == 0) {
        const char* e = static_cast<const char*>(memmem(buf.data() + pos, len - pos, "\r\n", 2));
        if (!e) break;
        chunk_left = strtoull(buf.data() + pos, nullptr, 16);
        pos = static_cast<size_t>(e - buf.data()) + 2;
        if (chunk_left == 0) done = true;
      } else {
        // Only whole lines are parsed in place; the padding after them is
        // the next bytes of the buffer (or its spare tail).
        size_t take = std::min(chunk_left, len - pos);
        handle_body(buf.data() + pos, take);
        pos += take;
        chunk_left -= take;
        if (chunk_left == 0) in_trailer = true;
      }
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  unsigned char md[32];
  SHA256_Final(md, &sha);
  ok = got_terminal && expect_bytes == out_bytes && hex(md, 32) == expect_sha;
  printf("{\"ok\":%s,\"stdout_bytes\":%llu,\"seconds\":%.6f}\n", ok ? "true" : "false",
         static_cast<unsigned long long>(out_bytes), secs);
  return ok ? 0 : 1;
}
