// execd/files/upload_writer: the disk side of an upload (execd/files/upload).
// The upload hands its WriteOps, in order, to one pool job at a time; the
// DiskState they act on (the temp files being written, the directories made
// for them) travels with that job, so only the job in flight touches it.
// abort_on_pool throws away what an upload that went leaves behind.
#pragma once

#include <uv.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "execd/files/file_jobs.h"
#include "fs/atomic_file.h"
#include "fs/permissions.h"
#include "pty/namespaces.h"

namespace execd::files {

constexpr size_t kWriteChunk = 1u << 20;  // file data handed to the writer at once

// File data on its way to the writer: kWriteChunk bytes of memory aligned
// for O_DIRECT (full chunks go to the device without a page-cache copy).
class Chunk {
 public:
  static Chunk allocate() {
    Chunk c;
    void* p = nullptr;
    if (posix_memalign(&p, fs::AtomicFile::kDirectIoAlign, kWriteChunk) != 0) throw std::bad_alloc();
    c.data_.reset(static_cast<char*>(p));
    return c;
  }
  bool allocated() const { return data_ != nullptr; }
  size_t size() const { return size_; }
  size_t room() const { return kWriteChunk - size_; }
  bool empty() const { return size_ == 0; }
  void append(const char* p, size_t n) {
    memcpy(data_.get() + size_, p, n);
    size_ += n;
  }
  std::string_view view() const { return {data_.get(), size_}; }
  void clear() { size_ = 0; }
  void release() {
    data_.reset();
    size_ = 0;
  }

 private:
  struct Free {
    void operator()(char* p) const { free(p); }
  };
  std::unique_ptr<char, Free> data_;
  size_t size_ = 0;
};

// One step for the writer; executed in order on the threadpool.
struct WriteOp {
  enum Kind { open, write, flush, commit, abort } kind = abort;
  size_t index = 0;          // entry (metadata/file pair) it concerns
  std::string path;          // open: target as given
  fs::PermissionSpec spec;   // open
  std::optional<std::string> e2b_user;  // open, E2B: path against this user's home, owned by the user
  std::map<std::string, std::string> e2b_metadata;  // open, E2B: user.e2b.* xattrs of the file
  std::string e2b_xattr_prefix;                     // open, E2B: where e2b_metadata goes
  Chunk data;                // write

  static WriteOp make(Kind kind, size_t index = 0) {
    WriteOp op;
    op.kind = kind;
    op.index = index;
    return op;
  }
};

// What the writer owns. Only the pool job in flight touches it.
struct DiskState {
  struct Entry {
    std::optional<fs::AtomicFile> file;
    std::vector<std::string> created_dirs;  // deepest first
    std::string shown_path;                 // E2B: the resolved path, as envd reports it
  };
  std::vector<Entry> entries;
  std::optional<FileReply> error;

  void run(WriteOp& op);
  // E2B: no variables expanded; relative paths and ~ against the user's
  // home; the file and the directories made for it belong to the user.
  void open_e2b(WriteOp& op);
  // Bad path or owner/group in a metadata part: the client's fault.
  void metadata_error(const fs::Error& e);
};

// What an upload that went leaves behind: thrown away on the pool (inside
// an isolated session's mount namespace, for its uploads).
void abort_on_pool(uv_loop_t* loop, std::unique_ptr<DiskState> disk,
                   std::shared_ptr<const pty::MountNamespace> mount);

}  // namespace execd::files
