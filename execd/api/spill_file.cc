// execd/api/spill_file: see header.
#include "execd/api/spill_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace execd::api {

namespace {
struct WriteReq {
  uv_fs_t req;
  std::shared_ptr<SpillFile> spill;  // alive until the write completes
};

int open_anonymous(const std::string& dir, std::string& error) {
  int fd = -1;
#ifdef O_TMPFILE
  fd = open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
#endif
  // Filesystems without O_TMPFILE: a named file, unlinked at once.
  std::string path = dir + "/spill-XXXXXX";
  fd = mkostemp(path.data(), O_CLOEXEC);
  if (fd < 0) {
    error = "cannot create a spill file in " + dir + ": " + strerror(errno);
    return -1;
  }
  unlink(path.c_str());
  return fd;
}
}  // namespace

std::shared_ptr<SpillFile> SpillFile::create(uv_loop_t* loop, const std::string& dir, uint64_t limit,
                                             std::string& error) {
  int fd = open_anonymous(dir, error);
  if (fd < 0) return nullptr;
  return std::shared_ptr<SpillFile>(new SpillFile(loop, std::make_shared<const http::OpenFile>(fd), limit));
}

bool SpillFile::append(const char* data, size_t len, std::string& error) {
  if (failed_) {
    error = failure_;
    return false;
  }
  if (accepted_ + len > limit_) {
    error = "more than " + std::to_string(limit_) + " bytes of output waited for the client";
    return false;
  }
  // One message bigger than the budget is taken (it is in memory already);
  // a backlog that keeps growing is not.
  if (pending_.size() + inflight_.size() > kMemoryBudget) {
    error = "the disk could not keep up with the output waiting for the client";
    return false;
  }
  accepted_ += len;
  pending_.append(data, len);
  pump();
  return true;
}

void SpillFile::pump() {
  if (!inflight_.empty() || pending_.empty() || failed_ || detached_) return;
  inflight_.swap(pending_);
  auto* w = new WriteReq{{}, shared_from_this()};
  w->req.data = w;
  uv_buf_t buf = uv_buf_init(inflight_.data(), static_cast<unsigned>(inflight_.size()));
  uv_fs_write(loop_, &w->req, file_->fd, &buf, 1, static_cast<int64_t>(durable_), [](uv_fs_t* req) {
    std::unique_ptr<WriteReq> w(static_cast<WriteReq*>(req->data));
    SpillFile& s = *w->spill;
    ssize_t n = req->result;
    uv_fs_req_cleanup(req);
    if (n <= 0) {
      if (n == 0) n = UV_EIO;
      s.failed_ = true;
      s.failure_ = std::string("writing the spill file failed: ") + uv_strerror(static_cast<int>(n));
      s.inflight_.clear();
      s.pending_.clear();
    } else {
      s.durable_ += static_cast<uint64_t>(n);
      s.inflight_.erase(0, static_cast<size_t>(n));
      // A short write: the rest goes first in the next one.
      if (!s.inflight_.empty()) {
        s.inflight_.append(s.pending_);
        s.pending_.swap(s.inflight_);
        s.inflight_.clear();
      }
    }
    if (s.detached_) return;
    s.pump();
    if (s.on_written_) s.on_written_();
  });
}

void SpillFile::detach() {
  detached_ = true;
  on_written_ = nullptr;
  pending_.clear();
}

}  // namespace execd::api
