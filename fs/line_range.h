// fs/line_range.h — line-based reads for GET /files/download?path=&offset=N&limit=M
// (the query values are protocol/query_values')
// (upstream v1.0.19, components/execd/pkg/web/controller/filesystem_download.go,
// serveLineRange).
//
// Upstream semantics, reproduced exactly:
//   * Lines end at '\n'. A final piece without '\n' is a line if it has at
//     least one byte; an empty file has no lines; "a\n" has one line.
//   * Every line loses ALL its trailing '\r' and '\n' bytes (Go's
//     bytes.TrimRight(line, "\r\n")): "a\r\n" -> "a", "a\r\r\n" -> "a",
//     "\r\n" -> "" (still a line, still counted). A '\r' inside a line stays.
//   * Lines offset .. offset+limit-1 (1-based) are written joined by "\n",
//     with no newline after the last one. No limit = to the end of the file.
//     offset past the last line = empty body (still 200).
//   * 200, Content-Type "text/plain; charset=utf-8", no Content-Length (the
//     body is streamed), no Content-Disposition. A read error after the
//     headers just ends the body early.
//
// The reader is incremental: it reads the file sequentially in fixed-size
// blocks, keeps one block in memory whatever the line lengths, and stops
// reading as soon as the last requested line has ended (line 5 of a 10 GiB
// file costs one block). Blocking calls: run it on the threadpool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fs/error.h"

namespace execd::fs {

class LineRangeReader {
 public:
  static constexpr size_t kDefaultBlockSize = 64 * 1024;

  LineRangeReader() = default;
  ~LineRangeReader();
  LineRangeReader(LineRangeReader&& other) noexcept;
  LineRangeReader& operator=(LineRangeReader&& other) noexcept;
  LineRangeReader(const LineRangeReader&) = delete;
  LineRangeReader& operator=(const LineRangeReader&) = delete;

  // Opens `path` (already expanded; see expand_path_abs) for reading lines
  // offset .. offset+limit-1 (limit 0 = all remaining; offset 0 is read as 1).
  // Errors: missing -> not_found "file not found: <path>"; not a regular
  // file (directory, FIFO, device) -> bad_request "path is a directory: <path>"
  // / "path is not a regular file: <path>" (same wording as the plain
  // download; Go would answer 200 with an empty body for a directory);
  // other open errors via errno_error. block_size 0 = kDefaultBlockSize.
  Status open(const std::string& path, uint64_t offset, uint64_t limit, size_t block_size = kDefaultBlockSize);
  // Same on an already open descriptor, which the reader then owns (closes).
  // No file-type check.
  void open_fd(int fd, uint64_t offset, uint64_t limit, size_t block_size = kDefaultBlockSize);

  // Writes up to `cap` (> 0) bytes of the response body into `buf`. Returns
  // the byte count; 0 means the body is complete (and stays 0). Blocking:
  // reads at most as many blocks as needed to fill `buf`. A read error is
  // returned once (internal, errno text); the body is then over.
  Result<size_t> next_chunk(char* buf, size_t cap);

  // Convenience for tests and small files: the whole body.
  Result<std::string> read_all(size_t chunk = 64 * 1024);

  bool done() const { return done_; }
  // Bytes read from the file so far (shows that reading stopped early).
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  void reset(int fd, uint64_t offset, uint64_t limit, size_t block_size);
  void close_fd();

  int fd_ = -1;
  std::vector<char> block_;
  size_t pos_ = 0, end_ = 0;     // unread bytes of block_ are [pos_, end_)
  uint64_t offset_ = 1, limit_ = 0;
  uint64_t line_no_ = 1;         // number of the line being scanned
  bool in_line_ = false;         // the current line has at least one byte
  uint64_t lines_started_ = 0;   // selected lines begun (written or being written)
  uint64_t pending_cr_ = 0;      // '\r' bytes held back: written only if content follows
  uint64_t cr_to_write_ = 0;     // held-back '\r' bytes now being written
  bool separator_owed_ = false;  // "\n" before the current selected line
  bool eof_ = false;
  bool done_ = false;
  uint64_t bytes_read_ = 0;
};

}  // namespace execd::fs
