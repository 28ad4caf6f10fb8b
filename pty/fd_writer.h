// pty/fd_writer: a process's stdin (a pipe or a PTY master), written
// without blocking from a queue on the event loop (uv_poll for
// writability). Owns the fd. Its owner calls close(), after which no
// callback comes; the writer then frees itself in the handle's close
// callback (the libuv rule for an object that holds a handle).
#pragma once

#include <uv.h>

#include <functional>
#include <string>

namespace execd::pty {

class FdWriter {
 public:
  static FdWriter* open(uv_loop_t* loop, int fd, std::function<void()> on_drained, std::function<void(int)> on_error);
  void write(const char* data, size_t len);
  size_t queued() const { return queue_.size() - head_; }
  void close();

 private:
  FdWriter() = default;
  void flush();
  static void on_poll(uv_poll_t* h, int status, int events);

  uv_poll_t poll_;
  int fd_ = -1;
  bool polling_ = false, closing_ = false, failed_ = false;
  std::string queue_;
  size_t head_ = 0;
  std::function<void()> on_drained_;
  std::function<void(int)> on_error_;
};

}  // namespace execd::pty
