// execd/api/spill_file: see header.
#include "execd/api/spill_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace execd::api {

namespace {
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
  if (writer_.waiting() > kMemoryBudget) {
    error = "the disk could not keep up with the output waiting for the client";
    return false;
  }
  accepted_ += len;
  writer_.append(data, len);
  pump();
  return true;
}

void SpillFile::pump() {
  if (failed_ || detached_) return;
  // The callback holds a reference: the stream may let go of the file while
  // a write is out.
  writer_.write_next(loop_, file_->fd, nullptr,
                     [self = shared_from_this()](const FileAppender::Outcome& o) { self->on_written(o); });
}

void SpillFile::on_written(const FileAppender::Outcome& o) {
  if (o.err) {
    failed_ = true;
    failure_ = std::string("writing the spill file failed: ") + strerror(o.err);
  }
  if (detached_) return;
  pump();
  if (on_written_) on_written_();
}

void SpillFile::detach() {
  detached_ = true;
  on_written_ = nullptr;
  writer_.drop_pending();
}

}  // namespace execd::api
