// execd/api/output_log: see header.
#include "execd/api/output_log.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "pty/pool_job.h"

namespace execd::api {

namespace {
// A read, on the pool: with the log's descriptor while it has one, else by
// path (a sealed log), opened and closed here. The log outlives the job
// (counted in ops_), so `path` may point into it.
struct ReadJob {
  OutputLog* log;
  int fd;
  const char* path;
  uint64_t offset;
  std::string buf;
  OutputLog::ReadFn read_fn;
  int err = 0;

  static void run(ReadJob& job) {
    ReadJob* r = &job;
    int fd = r->fd >= 0 ? r->fd : ::open(r->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      r->err = -errno;
      return;
    }
    size_t got = 0;
    while (got < r->buf.size()) {
      ssize_t k = ::pread(fd, r->buf.data() + got, r->buf.size() - got, static_cast<off_t>(r->offset + got));
      if (k < 0 && errno == EINTR) continue;
      if (k < 0) r->err = -errno;
      if (k <= 0) break;
      got += static_cast<size_t>(k);
    }
    if (fd != r->fd) ::close(fd);
    r->buf.resize(got);
  }
};

// Closing a file can wait on the disk, so it goes to the pool too, as a job
// a third the size of a uv_fs_t (a burst seals hundreds of logs at once).
void close_on_pool(uv_loop_t* loop, int fd) {
  struct CloseJob {
    int fd;
  };
  pty::queue_job<CloseJob>(
      loop, std::make_unique<CloseJob>(CloseJob{fd}), [](CloseJob& j) { ::close(j.fd); }, [](CloseJob&, int) {});
}
}  // namespace

void OutputLog::adopt(uint64_t size, uint64_t produced) {
  writer_.set_durable(size);
  total_ = produced > size ? produced : size;
  adopted_ = sealed_ = true;
}

void OutputLog::seal() {
  sealed_ = true;
  close_if_idle();
}

void OutputLog::close_if_idle() {
  if (!sealed_ || fd_ < 0 || ops_ > 0 || !writer_.idle() || !waiting_reads_.empty()) return;
  close_on_pool(loop_, fd_);
  fd_ = -1;
}

void OutputLog::append(const uint8_t* data, size_t len) {
  uint64_t room = total_ < limit_ ? limit_ - total_ : 0;
  total_ += len;
  if (room == 0 || failed_ || removed_ || adopted_ || sealed_) return;
  size_t take = len < room ? len : static_cast<size_t>(room);
  writer_.append(reinterpret_cast<const char*>(data), take);
  stored_ += take;
  pump();
}

void OutputLog::pump() {
  if (ops_ > 0 || failed_ || removed_) return;
  if (writer_.write_next(loop_, fd_, path_.c_str(), [this](const FileAppender::Outcome& o) { on_written(o); })) ++ops_;
}

void OutputLog::on_written(const FileAppender::Outcome& o) {
  --ops_;
  if (fd_ < 0 && o.fd >= 0) fd_ = o.fd;
  if (o.err) {
    if (fd_ < 0) spdlog::warn("cannot create output log {}: {}", path_, strerror(o.err));
    else spdlog::warn("writing output log {} failed: {}", path_, strerror(o.err));
    failed_ = true;
  }
  if (removed_) remove();
  else pump();
  // Caught up with the disk: a finished record keeps its log for up to
  // --retention, and the buffers would keep the capacity of the largest
  // batch (up to the pending budget) for all that time.
  if (ops_ == 0) writer_.release_buffers();
  run_waiting_reads();
  close_if_idle();
  if (on_written_) on_written_();
}

void OutputLog::read(uint64_t offset, size_t max, ReadFn fn) {
  if (writer_.durable() < stored_ && !failed_ && !removed_) {
    waiting_reads_.push_back({stored_, offset, max, std::move(fn)});
    return;
  }
  read_durable(offset, max, std::move(fn));
}

void OutputLog::run_waiting_reads() {
  if (waiting_reads_.empty()) return;
  std::vector<WaitingRead> ready, still;
  for (auto& w : waiting_reads_) (writer_.durable() >= w.needed || failed_ || removed_ ? ready : still).push_back(std::move(w));
  waiting_reads_ = std::move(still);
  for (auto& w : ready) read_durable(w.offset, w.max, std::move(w.fn));
}

void OutputLog::read_durable(uint64_t offset, size_t max, ReadFn fn) {
  const uint64_t durable = writer_.durable();
  if (offset >= durable || (fd_ < 0 && !sealed_)) {
    fn(0, {});
    return;
  }
  uint64_t avail = durable - offset;
  size_t n = avail < max ? static_cast<size_t>(avail) : max;
  ++ops_;
  pty::queue_job<ReadJob>(
      loop_, std::make_unique<ReadJob>(ReadJob{this, fd_, path_.c_str(), offset, std::string(n, '\0'), std::move(fn)}),
      ReadJob::run, [](ReadJob& r, int) {
    auto& log = *r.log;
    --log.ops_;
    r.read_fn(r.err, r.err ? std::string() : std::move(r.buf));
    // Output that arrived while the read was in flight waits in the appender:
    // write it now, or every later read would wait for it forever.
    if (log.removed_) log.remove();
    else log.pump();
    log.close_if_idle();
  });
}

void OutputLog::remove() {
  removed_ = true;
  on_written_ = nullptr;
  writer_.drop_pending();
  run_waiting_reads();
  if (ops_ > 0) return;  // finished by the last completion
  if (fd_ >= 0) {
    close_on_pool(loop_, fd_);
    fd_ = -1;
    auto* unlink_req = new uv_fs_t;
    uv_fs_unlink(loop_, unlink_req, path_.c_str(), [](uv_fs_t* req) {
      uv_fs_req_cleanup(req);
      delete req;
    });
  }
}

}  // namespace execd::api
