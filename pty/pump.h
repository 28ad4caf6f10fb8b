// pty/pump: reads one output fd (pipe or PTY master) on the event loop and
// hands each chunk to its owner. Pausing stops polling the fd, so a process
// writing to a full pipe simply blocks: that is how backpressure reaches it.
#pragma once

#include <uv.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

namespace execd::pty {

class OutputPump {
 public:
  using DataFn = std::function<void(const uint8_t* data, size_t len)>;
  // Where the owner wants the next bytes read (its own buffer, so that it
  // need not copy them); empty: the pump's shared buffer.
  using RoomFn = std::function<std::span<uint8_t>()>;
  using EofFn = std::function<void()>;

  // Takes ownership of `fd` (non-blocking). The pump frees itself after
  // close(); callbacks stop before close() returns.
  static OutputPump* open(uv_loop_t* loop, int fd, DataFn on_data, EofFn on_eof);

  // Asked before each read; the bytes then reach on_data where they lie.
  void set_room(RoomFn fn) { room_ = std::move(fn); }
  void pause();
  void resume();
  bool paused() const { return paused_; }
  bool at_eof() const { return eof_; }
  // Reads what is available right now (until EAGAIN) unless paused.
  // Returns the number of bytes delivered.
  size_t drain_now();
  void close();
  uint64_t bytes_read() const { return bytes_; }

 private:
  OutputPump() = default;
  static void on_poll(uv_poll_t* h, int status, int events);
  size_t read_some(int max_reads);
  void finish();

  uv_poll_t poll_;
  int fd_ = -1;
  bool paused_ = false, eof_ = false, closing_ = false, polling_ = false;
  // A short read empties a pipe, but a PTY hands out a few KiB per read.
  bool short_read_drains_ = false;
  uint64_t bytes_ = 0;
  DataFn on_data_;
  RoomFn room_;
  EofFn on_eof_;
};

}  // namespace execd::pty
