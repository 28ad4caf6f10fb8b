// execd/work_gate: a cap on how many of libuv's pool threads file work
// may hold at once. The pool is process-wide and shared with command
// start-up (working directories, records, journal), so without a cap a burst
// of searches, listings or transfers would make `echo ok` wait for a disk
// walk. Work over the cap waits here, in arrival order, and work whose client
// left while it waited is withdrawn before it ever takes a thread. Owned by
// the Daemon and handed to the file routes; loop thread only.
#pragma once

#include <uv.h>

#include <cstddef>
#include <deque>
#include <memory>

namespace execd::pty {
struct MountNamespace;
}

#include "fs/identity.h"

namespace execd {

class WorkGate {
 public:
  // One piece of gated work. The caller embeds it in its job and gets the
  // uv_work_t (`req`, whose `data` is the caller's) in both callbacks.
  struct Ticket {
    uv_work_t req;  // first: the gate finds its ticket from the request
    WorkGate* gate = nullptr;
    uv_loop_t* loop = nullptr;
    uv_work_cb work = nullptr;
    uv_after_work_cb after = nullptr;
    // Set: the work runs as this user (fs/identity); it outlives the ticket.
    const fs::Identity* identity = nullptr;
    // Work on an isolated session's files runs inside the session's mount
    // namespace (pty::MountScope), which the ticket keeps alive. If the
    // thread cannot enter it, the work does not run and `after` gets UV_EIO.
    std::shared_ptr<const pty::MountNamespace> mount;
    int mount_error = 0;
  };

  explicit WorkGate(size_t cap) : cap_(cap) {}
  WorkGate(const WorkGate&) = delete;
  WorkGate& operator=(const WorkGate&) = delete;

  // Like uv_queue_work, at most `cap` at a time. `after` runs on the loop;
  // with UV_ECANCELED when the request was withdrawn by cancel().
  int queue(uv_loop_t* loop, Ticket& t, uv_work_cb work, uv_after_work_cb after);
  // Withdraws `t` if it has not started (its `after` runs, now, with
  // UV_ECANCELED); work already on a thread runs to its end.
  void cancel(Ticket& t);
  size_t running() const { return running_; }
  size_t waiting() const { return waiting_.size(); }

 private:
  static void run(uv_work_t* req);
  static void finished(uv_work_t* req, int status);
  int start(Ticket& t);
  void start_waiting();

  size_t cap_;
  size_t running_ = 0;
  std::deque<Ticket*> waiting_;
};

// The pool size execd asks libuv for (UV_THREADPOOL_SIZE); file work gets
// half of it, so command start-up always finds a thread.
constexpr size_t kPoolThreads = 16;

}  // namespace execd
