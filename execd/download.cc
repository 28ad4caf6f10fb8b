// execd/download: see header.
#include "execd/download.h"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <optional>

#include "execd/file_work.h"
#include "fs/paths.h"
#include "protocol/errors.h"
#include "protocol/range.h"

namespace execd {

namespace codes = protocol::codes;
using protocol::HttpRequest;
using protocol::QueryParams;
using protocol::RouteParams;

namespace {

constexpr uint64_t kSliceBytes = 16ull << 20;
constexpr auto kSliceTime = std::chrono::milliseconds(100);
constexpr int kPollMs = 100;
constexpr size_t kSendfileChunk = 4u << 20;

bool is_attr_char(unsigned char c) {
  // RFC 8187 attr-char
  return isalnum(c) || std::string_view("!#$&+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

}  // namespace

std::string content_disposition(std::string_view name) {
  bool plain = !name.empty();
  for (unsigned char c : name)
    if (c < 0x20 || c >= 0x7f) plain = false;
  std::string out = "attachment; filename=\"";
  if (plain) {
    for (char c : name) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
    return out;
  }
  static const char* hex = "0123456789ABCDEF";
  std::string pct;
  for (unsigned char c : name) {
    if (is_attr_char(c)) {
      pct += static_cast<char>(c);
    } else {
      pct += '%';
      pct += hex[c >> 4];
      pct += hex[c & 15];
    }
  }
  out += pct;
  out += "\"; filename*=UTF-8''";
  out += pct;
  return out;
}

std::string http_date(time_t t) {
  struct tm tm {};
  gmtime_r(&t, &tm);
  static const char* days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static const char* months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                 "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  char buf[64];
  snprintf(buf, sizeof buf, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday % 7], tm.tm_mday,
           months[tm.tm_mon % 12], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
  return buf;
}

namespace {

// ---- step 1 (pool): open, validate, build the head ---------------------------

struct Prepared {
  int fd = -1;
  uint64_t offset = 0, length = 0;
  std::string head;
};

struct OpenWork {
  uv_work_t work;
  std::weak_ptr<Connection> conn;
  const Context* ctx = nullptr;
  std::string path;
  std::optional<std::string> range;
  bool keep_alive = true;
  // results
  std::optional<FileReply> error;
  Prepared prepared;
};

void open_for_download(OpenWork& w) {
  auto expanded = fs::expand_path(w.path, fs::process_env_lookup());
  if (!expanded) {
    w.error = FileReply::from(expanded.error());
    return;
  }
  const std::string& path = expanded.value();
  // O_NONBLOCK: opening a FIFO must not hang a pool thread.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    int err = errno;
    fs::Error e = fs::errno_error(err, "open " + path);
    if (err == ENOENT) e.message = "file not found: " + path;
    w.error = FileReply::from(e);
    return;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    w.error = FileReply::from(fs::errno_error(errno, "stat " + path));
    close(fd);
    return;
  }
  if (!S_ISREG(st.st_mode)) {
    w.error = FileReply::error(400, codes::kInvalidRequestBody,
                               (S_ISDIR(st.st_mode) ? "path is a directory: " : "path is not a regular file: ") + path);
    close(fd);
    return;
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  auto range = protocol::parse_range_header(
      w.range ? std::optional<std::string_view>(*w.range) : std::nullopt, size);
  std::string unsatisfied = "Content-Range: bytes */" + std::to_string(size);
  if (range.outcome == protocol::RangeOutcome::malformed) {
    w.error = FileReply::error(416, codes::kUnknown, "invalid Range header: " + *w.range);
    w.error->headers.push_back(unsatisfied);
    close(fd);
    return;
  }
  if (range.outcome == protocol::RangeOutcome::unsatisfiable) {
    w.error = FileReply::error(416, codes::kRangeNotSatisfiable,
                               "range " + *w.range + " does not overlap the file (" + std::to_string(size) + " bytes)");
    w.error->headers.push_back(unsatisfied);
    close(fd);
    return;
  }

  std::vector<std::string> headers = {"Content-Type: application/octet-stream",
                                      "Content-Disposition: " + content_disposition(fs::base_name(fs::clean_path(path))),
                                      "Accept-Ranges: bytes", "Last-Modified: " + http_date(st.st_mtime)};
  int status = 200;
  Prepared& p = w.prepared;
  if (range.outcome == protocol::RangeOutcome::satisfiable) {
    status = 206;
    p.offset = range.first;
    p.length = range.length();
    headers.push_back("Content-Range: bytes " + std::to_string(range.first) + "-" + std::to_string(range.last) + "/" +
                      std::to_string(size));
  } else {
    p.offset = 0;
    p.length = size;
  }
  headers.push_back("Content-Length: " + std::to_string(p.length));
  if (!w.keep_alive) headers.emplace_back("Connection: close");
  p.head = protocol::response_head(status, headers);
  p.fd = fd;
}

// ---- step 2 (pool, sliced): head + sendfile; waits on the loop in between ----

class Download : public StreamObserver {
 public:
  Download(Connection& conn, const Context& ctx, Prepared p, int sock)
      : conn_(&conn), alive_(conn.weak()), ctx_(ctx), loop_(ctx.loop), file_fd_(p.fd), sock_(sock), offset_(p.offset),
        remaining_(p.length), head_(std::move(p.head)) {
    work_.data = this;
  }

  void start() {
    conn_->set_observer(this);
    queue_slice();
  }

  void on_writable() override {}
  void on_closed() override {
    conn_ = nullptr;
    cancelled_.store(true, std::memory_order_relaxed);
    if (!in_flight_) finish();
  }

 private:
  void queue_slice() {
    in_flight_ = true;
    int rc = uv_queue_work(loop_, &work_, [](uv_work_t* w) { static_cast<Download*>(w->data)->run_slice(); },
                           [](uv_work_t* w, int) { static_cast<Download*>(w->data)->after_slice(); });
    if (rc != 0) {
      in_flight_ = false;
      fail("cannot queue work");
    }
  }

  // Pool thread. Touches only the descriptors and its own counters.
  void run_slice() {
    stalled_ = false;
    auto start = std::chrono::steady_clock::now();
    uint64_t sent = 0;
    while (!cancelled_.load(std::memory_order_relaxed)) {
      if (head_sent_ == head_.size() && remaining_ == 0) return;
      if (sent >= kSliceBytes || std::chrono::steady_clock::now() - start >= kSliceTime) return;
      ssize_t n;
      if (head_sent_ < head_.size()) {
        n = ::send(sock_, head_.data() + head_sent_, head_.size() - head_sent_, MSG_NOSIGNAL);
        if (n > 0) head_sent_ += static_cast<size_t>(n);
      } else {
        off_t off = static_cast<off_t>(offset_);
        n = ::sendfile(sock_, file_fd_, &off, static_cast<size_t>(std::min<uint64_t>(remaining_, kSendfileChunk)));
        if (n > 0) {
          offset_ += static_cast<uint64_t>(n);
          remaining_ -= static_cast<uint64_t>(n);
        } else if (n == 0) {
          error_ = "file shrank while being sent";
          return;
        }
      }
      if (n > 0) {
        sent += static_cast<uint64_t>(n);
        continue;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN) {
        error_ = fs::errno_text(errno);
        return;
      }
      pollfd pfd{sock_, POLLOUT, 0};
      int pr = ::poll(&pfd, 1, kPollMs);
      if (pr == 0) {  // the client is not reading: let the loop wait for it
        stalled_ = true;
        return;
      }
      if (pr < 0 && errno != EINTR) {
        error_ = fs::errno_text(errno);
        return;
      }
    }
  }

  // Loop thread.
  void after_slice() {
    in_flight_ = false;
    if (!conn_ || cancelled_.load(std::memory_order_relaxed)) return finish();
    if (!error_.empty()) return fail(error_);
    if (head_sent_ == head_.size() && remaining_ == 0) {
      Connection* c = conn_;
      c->set_observer(nullptr);
      conn_ = nullptr;
      c->finish_raw_response();
      return finish();
    }
    if (stalled_) {
      // Draining for shutdown: a client that does not read is not waited for.
      if (ctx_.shutting_down) return fail("client not reading during shutdown");
      return wait_writable();
    }
    queue_slice();
  }

  void wait_writable() {
    if (!poll_) {
      poll_ = new uv_poll_t;
      if (uv_poll_init(loop_, poll_, sock_) != 0) {
        delete poll_;
        poll_ = nullptr;
        return fail("cannot watch the socket");
      }
      poll_->data = this;
    }
    if (uv_is_closing(reinterpret_cast<uv_handle_t*>(poll_))) return fail("shutting down");  // loop teardown
    uv_poll_start(poll_, UV_WRITABLE | UV_DISCONNECT, [](uv_poll_t* h, int, int) {
      auto* self = static_cast<Download*>(h->data);
      uv_poll_stop(h);
      if (!self->conn_) return self->finish();
      self->queue_slice();
    });
  }

  // The head is (probably) out: the only honest way to report a failure is
  // to cut the connection short.
  void fail(const std::string& why) {
    spdlog::warn("download aborted: {}", why);
    if (conn_) {
      Connection* c = conn_;
      c->set_observer(nullptr);
      conn_ = nullptr;
      c->close();
    }
    finish();
  }

  void finish() {
    if (finished_) return;
    finished_ = true;
    if (poll_) {
      uv_poll_stop(poll_);
      if (!uv_is_closing(reinterpret_cast<uv_handle_t*>(poll_))) {
        uv_close(reinterpret_cast<uv_handle_t*>(poll_), [](uv_handle_t* h) {
          auto* self = static_cast<Download*>(h->data);
          delete reinterpret_cast<uv_poll_t*>(h);
          self->poll_ = nullptr;
          delete self;
        });
        return;
      }
      // Closed by loop teardown; the handle memory is leaked deliberately
      // (its close callback was nullptr and may not have run yet).
      poll_ = nullptr;
    }
    delete this;
  }

 public:
  ~Download() override {
    if (file_fd_ >= 0) close(file_fd_);
    if (sock_ >= 0) close(sock_);
  }

 private:
  Connection* conn_;  // nullptr once the connection closed or the response ended
  std::weak_ptr<Connection> alive_;
  const Context& ctx_;
  uv_loop_t* loop_;
  uv_work_t work_{};
  uv_poll_t* poll_ = nullptr;
  int file_fd_;
  int sock_;  // our own dup: stays valid even if the connection closes mid-slice
  uint64_t offset_, remaining_;
  std::string head_;
  size_t head_sent_ = 0;
  std::atomic<bool> cancelled_{false};
  bool in_flight_ = false, stalled_ = false, finished_ = false;
  std::string error_;
};

void after_open(uv_work_t* work, int) {
  std::unique_ptr<OpenWork> w(static_cast<OpenWork*>(work->data));
  auto conn = w->conn.lock();
  if (!conn || conn->closed()) {
    if (w->prepared.fd >= 0) close(w->prepared.fd);
    return;
  }
  if (w->error) return send_reply(*conn, *w->error);
  int sock = fcntl(conn->socket_fd(), F_DUPFD_CLOEXEC, 0);
  if (sock < 0) {
    close(w->prepared.fd);
    return conn->respond_error(500, codes::kRuntimeError, "dup socket: " + fs::errno_text(errno));
  }
  auto* d = new Download(*conn, *w->ctx, std::move(w->prepared), sock);
  d->start();
}

void handle_download(const Context& ctx, Connection& conn, const HttpRequest& req, const QueryParams& q) {
  const std::string* path = protocol::query_value(q, "path");
  if (!path) return conn.respond_error(400, codes::kMissingQuery, "missing query parameter 'path'");
  auto* w = new OpenWork{};
  w->work.data = w;
  w->conn = conn.weak();
  w->ctx = &ctx;
  w->path = *path;
  if (const std::string* range = req.header("range")) w->range = *range;
  w->keep_alive = req.keep_alive;
  int rc = uv_queue_work(
      ctx.loop, &w->work, [](uv_work_t* work) { open_for_download(*static_cast<OpenWork*>(work->data)); }, after_open);
  if (rc != 0) {
    delete w;
    conn.respond_error(500, codes::kRuntimeError, std::string("cannot queue work: ") + uv_strerror(rc));
  }
}

}  // namespace

void register_download_route(Routes& routes, Context& ctx) {
  routes.add("GET", "/files/download", [&ctx](Connection& c, HttpRequest& r, const RouteParams&, const QueryParams& q) {
    handle_download(ctx, c, r, q);
  });
}

}  // namespace execd
