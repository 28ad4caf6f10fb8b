// tests/bench/http_floor: the least an HTTP command server can do, as a
// second floor for the think-time benchmark. One blocking thread: accept a
// connection, read one request, posix_spawn `BASH -c true` with stdout and
// stderr on pipes, answer with a chunked response whose first chunk goes out
// as the command starts and whose last one (after both pipes reach EOF and
// the child is waited for) names "execution_complete", then close. No
// parsing beyond the header end and Content-Length, no framing, no logs, no
// cgroups, no records: what is left of a round trip over it is the loopback
// connection and the wake-ups, which execd pays as well.
//
//   http_floor BASH  ->  prints its port, then serves until killed
//
// stream_client --think runs against it as against execd (the token header
// is ignored).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

extern char** environ;

namespace {

bool write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = write(fd, s.data() + done, s.size() - done);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Reads up to the end of the headers and the body Content-Length names.
bool read_request(int fd) {
  std::string got;
  char buf[4096];
  for (;;) {
    size_t end = got.find("\r\n\r\n");
    if (end != std::string::npos) {
      size_t body = 0;
      size_t cl = got.find("Content-Length:");
      if (cl != std::string::npos && cl < end) body = strtoul(got.c_str() + cl + 15, nullptr, 10);
      if (got.size() >= end + 4 + body) return true;
    }
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return false;
    got.append(buf, static_cast<size_t>(n));
  }
}

std::string chunk(const std::string& s) {
  char len[32];
  snprintf(len, sizeof len, "%zx\r\n", s.size());
  return len + s + "\r\n";
}

void serve(int c, const char* bash) {
  if (!read_request(c)) return;
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  char* args[] = {const_cast<char*>(bash), const_cast<char*>("-c"), const_cast<char*>("true"), nullptr};
  pid_t pid = -1;
  int rc = posix_spawn(&pid, bash, &fa, nullptr, args, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  close(err[1]);
  if (rc == 0) {
    write_all(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
                     chunk("{\"type\":\"init\"}\n\n"));
    pollfd p[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    char buf[65536];
    int open_pipes = 2;
    while (open_pipes > 0 && poll(p, 2, -1) > 0) {
      for (auto& e : p) {
        if (e.fd < 0 || !e.revents) continue;
        if (read(e.fd, buf, sizeof buf) <= 0) {
          e.fd = -1;
          --open_pipes;
        }
      }
    }
    int status;
    waitpid(pid, &status, 0);
    write_all(c, chunk("{\"type\":\"execution_complete\"}\n\n") + "0\r\n\r\n");
  }
  close(out[0]);
  close(err[0]);
}

}  // namespace

int main(int argc, char** argv) {
  const char* bash = argc > 1 ? argv[1] : "/bin/bash";
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (s < 0 || bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(s, 128) != 0 ||
      getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    perror("http_floor: listen");
    return 1;
  }
  printf("%d\n", ntohs(a.sin_port));
  fflush(stdout);
  for (;;) {
    int c = accept4(s, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    int one = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    serve(c, bash);
    close(c);
  }
}
