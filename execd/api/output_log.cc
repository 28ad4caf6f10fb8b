// execd/api/output_log: see header.
#include "execd/api/output_log.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>

namespace execd::api {

namespace {
struct FsReq {
  uv_fs_t req;
  OutputLog* log;
  std::string buf;
  OutputLog::ReadFn read_fn;
};

// A read of a sealed log: the pool thread works on its own copy of the path.
struct SealedRead {
  uv_work_t work;
  OutputLog* log;
  std::string path;
  uint64_t offset;
  std::string buf;
  int err = 0;
  OutputLog::ReadFn read_fn;
};
}  // namespace

void OutputLog::adopt(uint64_t size, uint64_t produced) {
  durable_ = size;
  total_ = produced > size ? produced : size;
  adopted_ = sealed_ = true;
}

void OutputLog::seal() {
  sealed_ = true;
  close_if_idle();
}

void OutputLog::close_if_idle() {
  if (!sealed_ || fd_ < 0 || ops_ > 0 || opening_ || !pending_.empty() || !waiting_reads_.empty()) return;
  auto* close_req = new uv_fs_t;
  uv_fs_close(loop_, close_req, fd_, [](uv_fs_t* req) {
    uv_fs_req_cleanup(req);
    delete req;
  });
  fd_ = -1;
}

void OutputLog::append(const uint8_t* data, size_t len) {
  uint64_t room = total_ < limit_ ? limit_ - total_ : 0;
  total_ += len;
  if (room == 0 || failed_ || removed_ || adopted_ || sealed_) return;
  size_t take = len < room ? len : static_cast<size_t>(room);
  pending_.append(reinterpret_cast<const char*>(data), take);
  stored_ += take;
  pump();
}

void OutputLog::pump() {
  if (ops_ > 0 || opening_ || failed_ || removed_ || pending_.empty()) return;
  if (fd_ < 0) {
    opening_ = true;
    auto* r = new FsReq{{}, this, {}, {}};
    r->req.data = r;
    ++ops_;
    uv_fs_open(loop_, &r->req, path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600, [](uv_fs_t* req) {
      std::unique_ptr<FsReq> r(static_cast<FsReq*>(req->data));
      auto& log = *r->log;
      --log.ops_;
      log.opening_ = false;
      if (req->result < 0) {
        spdlog::warn("cannot create output log {}: {}", log.path_, uv_strerror(static_cast<int>(req->result)));
        log.failed_ = true;
        log.pending_.clear();
        log.run_waiting_reads();
      } else {
        log.fd_ = static_cast<int>(req->result);
      }
      uv_fs_req_cleanup(req);
      if (log.removed_) log.remove();
      else log.pump();
      log.close_if_idle();
      if (log.on_written_) log.on_written_();
    });
    return;
  }
  inflight_.swap(pending_);
  pending_.clear();
  auto* r = new FsReq{{}, this, {}, {}};
  r->req.data = r;
  ++ops_;
  uv_buf_t buf = uv_buf_init(inflight_.data(), static_cast<unsigned>(inflight_.size()));
  uv_fs_write(loop_, &r->req, fd_, &buf, 1, static_cast<int64_t>(durable_), [](uv_fs_t* req) {
    std::unique_ptr<FsReq> r(static_cast<FsReq*>(req->data));
    auto& log = *r->log;
    --log.ops_;
    if (req->result < 0) {
      spdlog::warn("writing output log {} failed: {}", log.path_, uv_strerror(static_cast<int>(req->result)));
      log.failed_ = true;
      log.pending_.clear();
    } else if (static_cast<size_t>(req->result) < log.inflight_.size()) {
      log.durable_ += static_cast<uint64_t>(req->result);
      log.inflight_.erase(0, static_cast<size_t>(req->result));
      log.pending_.insert(0, log.inflight_);
    } else {
      log.durable_ += static_cast<uint64_t>(req->result);
    }
    log.inflight_.clear();
    uv_fs_req_cleanup(req);
    if (log.removed_) log.remove();
    else log.pump();
    if (log.ops_ == 0) log.release_buffers();
    log.run_waiting_reads();
    log.close_if_idle();
    if (log.on_written_) log.on_written_();
  });
}

// Caught up with the disk: a finished record keeps its log for up to
// --retention, and the two buffers would keep the capacity of the largest
// batch (up to the pending budget each) for all that time.
void OutputLog::release_buffers() {
  if (pending_.empty()) std::string().swap(pending_);
  std::string().swap(inflight_);
}

void OutputLog::read(uint64_t offset, size_t max, ReadFn fn) {
  if (durable_ < stored_ && !failed_ && !removed_) {
    waiting_reads_.push_back({stored_, offset, max, std::move(fn)});
    return;
  }
  read_durable(offset, max, std::move(fn));
}

void OutputLog::run_waiting_reads() {
  if (waiting_reads_.empty()) return;
  std::vector<WaitingRead> ready, still;
  for (auto& w : waiting_reads_) (durable_ >= w.needed || failed_ || removed_ ? ready : still).push_back(std::move(w));
  waiting_reads_ = std::move(still);
  for (auto& w : ready) read_durable(w.offset, w.max, std::move(w.fn));
}

void OutputLog::read_durable(uint64_t offset, size_t max, ReadFn fn) {
  if (offset >= durable_ || (fd_ < 0 && !sealed_)) {
    fn(0, {});
    return;
  }
  uint64_t avail = durable_ - offset;
  size_t n = avail < max ? static_cast<size_t>(avail) : max;
  if (fd_ < 0) return read_sealed(offset, n, std::move(fn));
  auto* r = new FsReq{{}, this, std::string(n, '\0'), std::move(fn)};
  r->req.data = r;
  ++ops_;
  uv_buf_t buf = uv_buf_init(r->buf.data(), static_cast<unsigned>(n));
  uv_fs_read(loop_, &r->req, fd_, &buf, 1, static_cast<int64_t>(offset), [](uv_fs_t* req) {
    std::unique_ptr<FsReq> r(static_cast<FsReq*>(req->data));
    auto& log = *r->log;
    --log.ops_;
    int err = req->result < 0 ? static_cast<int>(req->result) : 0;
    if (!err) r->buf.resize(static_cast<size_t>(req->result));
    uv_fs_req_cleanup(req);
    r->read_fn(err, err ? std::string() : std::move(r->buf));
    // Output that arrived while the read was in flight waits in pending_:
    // write it now, or every later read would wait for it forever.
    if (log.removed_) log.remove();
    else log.pump();
    log.close_if_idle();
  });
}

void OutputLog::read_sealed(uint64_t offset, size_t n, ReadFn fn) {
  auto* r = new SealedRead{{}, this, path_, offset, std::string(n, '\0'), 0, std::move(fn)};
  r->work.data = r;
  ++ops_;
  uv_queue_work(
      loop_, &r->work,
      [](uv_work_t* w) {
        auto* r = static_cast<SealedRead*>(w->data);
        int fd = ::open(r->path.c_str(), O_RDONLY | O_CLOEXEC);
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
        ::close(fd);
        r->buf.resize(got);
      },
      [](uv_work_t* w, int) {
        std::unique_ptr<SealedRead> r(static_cast<SealedRead*>(w->data));
        auto& log = *r->log;
        --log.ops_;
        r->read_fn(r->err, r->err ? std::string() : std::move(r->buf));
        if (log.removed_) log.remove();
      });
}

void OutputLog::remove() {
  removed_ = true;
  on_written_ = nullptr;
  pending_.clear();
  run_waiting_reads();
  if (ops_ > 0) return;  // finished by the last completion
  if (fd_ >= 0) {
    auto* close_req = new uv_fs_t;
    uv_fs_close(loop_, close_req, fd_, [](uv_fs_t* req) {
      uv_fs_req_cleanup(req);
      delete req;
    });
    fd_ = -1;
    auto* unlink_req = new uv_fs_t;
    uv_fs_unlink(loop_, unlink_req, path_.c_str(), [](uv_fs_t* req) {
      uv_fs_req_cleanup(req);
      delete req;
    });
  }
}

}  // namespace execd::api
