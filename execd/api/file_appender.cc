// execd/api/file_appender: see header.
#include "execd/api/file_appender.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "pty/pool_job.h"

namespace execd::api {

struct FileAppender::Job {
  FileAppender* appender;
  int fd;
  const char* path;
  const char* data;
  size_t len;
  uint64_t offset;
  Done done;
  size_t written = 0;
  int err = 0;

  // On a pool thread: the job's own fields and the in-flight buffer, which
  // the loop leaves alone while the write is out.
  static void run(Job& job) {
    Job* j = &job;
    if (j->fd < 0) {
      j->fd = ::open(j->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (j->fd < 0) {
        j->err = errno;
        return;
      }
    }
    while (j->written < j->len) {
      ssize_t n = ::pwrite(j->fd, j->data + j->written, j->len - j->written, static_cast<off_t>(j->offset + j->written));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        j->err = n < 0 ? errno : EIO;
        return;
      }
      j->written += static_cast<size_t>(n);
    }
  }

  static void after(Job& job, int) {
    Job* j = &job;
    FileAppender& a = *j->appender;
    a.writing_ = false;
    a.durable_ += j->written;
    a.inflight_.clear();
    if (j->err) a.pending_.clear();
    j->done(Outcome{j->written, j->err, j->fd});
  }
};

bool FileAppender::write_next(uv_loop_t* loop, int fd, const char* path, Done done) {
  if (writing_ || pending_.empty()) return false;
  inflight_.swap(pending_);
  pending_.clear();
  writing_ = true;
  pty::queue_job<Job>(loop, std::make_unique<Job>(Job{this, fd, path, inflight_.data(), inflight_.size(), durable_, std::move(done)}),
                      Job::run, Job::after);
  return true;
}

void FileAppender::release_buffers() {
  if (writing_) return;
  if (pending_.empty()) std::string().swap(pending_);
  std::string().swap(inflight_);
}

}  // namespace execd::api
