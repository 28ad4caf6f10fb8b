// A Connection on a fake transport and a fake host: no sockets, no loop.
// The transport records what is written and takes at most `budget` bytes
// before it answers EAGAIN; the host's safe point runs when the test says.
// Shared by the connection tests and the execution tests.
#pragma once

#include <errno.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "execd/http/connection.h"

namespace rig {

using namespace execd::http;

struct FakeTransport : Transport {
  TransportEvents* events = nullptr;
  std::string written;
  size_t budget = SIZE_MAX;  // bytes the peer takes before EAGAIN
  int error = 0;             // errno to fail writes with
  bool readable = false, writable = false, shut = false, closed = false;

  ssize_t writev(const struct iovec* iov, int count) override {
    if (error) return -error;
    size_t n = 0;
    for (int i = 0; i < count && budget > 0; ++i) {
      size_t take = std::min(iov[i].iov_len, budget);
      written.append(static_cast<const char*>(iov[i].iov_base), take);
      budget -= take;
      n += take;
      if (take < iov[i].iov_len) break;
    }
    return n == 0 ? -EAGAIN : static_cast<ssize_t>(n);
  }
  ssize_t sendfile(int, uint64_t, size_t) override { return -ENOSYS; }
  void want_readable(bool on) override { readable = on; }
  void want_writable(bool on) override { writable = on; }
  void shutdown_write() override { shut = true; }
  void close() override { closed = true; }
};

struct FakeHost : ConnectionHost {
  std::function<void(Exchange&)> on_head;
  std::vector<Connection*> due;
  bool connection_closed = false;
  uint64_t now = 1000;

  void on_request_head(Exchange& ex) override { on_head(ex); }
  void schedule(Connection& c) override { due.push_back(&c); }
  void on_connection_closed(Connection&) override { connection_closed = true; }
  uint64_t now_ms() override { return now; }
  bool draining() override { return false; }

  // The server's safe point.
  void run_safe_point() {
    while (!due.empty()) {
      auto now_due = std::move(due);
      due.clear();
      for (Connection* c : now_due) c->run_deferred();
    }
  }
};

struct Rig {
  FakeHost host;
  FakeTransport* t = new FakeTransport;  // owned by the rig (the real one frees itself)
  std::unique_ptr<Connection> conn;
  std::unique_ptr<FakeTransport> t_owner{t};

  Rig() {
    ConnectionLimits limits;
    limits.idle_timeout_ms = 5000;
    conn = std::make_unique<Connection>(host, limits);
    t->events = conn.get();
  }
  void start() { conn->start(t, "test"); }
  void feed(const std::string& bytes) { conn->on_transport_data(bytes.data(), bytes.size()); }
  void finish_close() {
    host.run_safe_point();
    if (t->closed && !host.connection_closed) conn->on_transport_closed();
  }
};

}  // namespace rig
