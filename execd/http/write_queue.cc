// execd/http/write_queue: see header.
#include "execd/http/write_queue.h"

#include <unistd.h>

namespace execd::http {

OpenFile::~OpenFile() {
  if (fd >= 0) ::close(fd);
}

void WriteQueue::append(std::string&& data) {
  if (data.empty()) return;
  bytes_ += data.size();
  if (!empty() && !segments_.back().file && data.size() < kCoalesceBelow &&
      segments_.back().data.size() + data.size() <= segments_.back().data.capacity()) {
    segments_.back().data.append(data);
    recycle(std::move(data));
    return;
  }
  Segment s;
  s.data = std::move(data);
  segments_.push_back(std::move(s));
}

void WriteQueue::append(std::string_view data) {
  if (data.empty()) return;
  if (!empty() && !segments_.back().file && data.size() < kCoalesceBelow) {
    bytes_ += data.size();
    segments_.back().data.append(data);
    return;
  }
  std::string s = take_buffer();
  s.assign(data);
  append(std::move(s));
}

void WriteQueue::append_file(SharedFile file, uint64_t offset, uint64_t length) {
  if (length == 0) return;
  Segment s;
  s.file = std::move(file);
  s.offset = offset;
  s.length = length;
  bytes_ += length;
  segments_.push_back(std::move(s));
}

int WriteQueue::gather(struct iovec* iov, int max) const {
  int n = 0;
  for (size_t i = head_; i < segments_.size(); ++i) {
    const Segment& s = segments_[i];
    if (n >= max || s.file) break;
    iov[n].iov_base = const_cast<char*>(s.data.data() + s.start);
    iov[n].iov_len = s.data.size() - s.start;
    ++n;
  }
  return n;
}

void WriteQueue::consume(size_t n) {
  bytes_ -= n;
  while (n > 0 && !empty()) {
    Segment& s = segments_[head_];
    if (s.file) {
      uint64_t take = n < s.length ? n : s.length;
      s.offset += take;
      s.length -= take;
      n -= static_cast<size_t>(take);
      if (s.length == 0) pop_front();
      continue;
    }
    size_t left = s.data.size() - s.start;
    if (n < left) {
      s.start += n;
      return;
    }
    n -= left;
    recycle(std::move(s.data));
    pop_front();
  }
}

void WriteQueue::pop_front() {
  segments_[head_] = Segment();
  if (++head_ == segments_.size()) {
    segments_.clear();
    head_ = 0;
  } else if (head_ >= 32 && head_ * 2 >= segments_.size()) {
    segments_.erase(segments_.begin(), segments_.begin() + static_cast<std::ptrdiff_t>(head_));
    head_ = 0;
  }
}

void WriteQueue::clear() {
  segments_ = {};
  head_ = 0;
  bytes_ = 0;
}

std::string WriteQueue::take_buffer() {
  if (spare_.empty()) return {};
  std::string s = std::move(spare_.back());
  spare_.pop_back();
  s.clear();
  return s;
}

void WriteQueue::recycle(std::string&& s) {
  // Only buffers worth keeping: big enough to matter, not so big that an
  // idle connection would sit on megabytes.
  if (spare_.size() < kSpareBuffers && s.capacity() >= 4096 && s.capacity() <= (1u << 20)) {
    s.clear();
    spare_.push_back(std::move(s));
  }
}

}  // namespace execd::http
