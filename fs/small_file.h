// fs/small_file: read a whole small file (/proc and /sys entries, the token
// file, records in the state directory) with plain read(2), and write a
// whole buffer to a descriptor with plain write(2): no iostreams,
// whose first use initialises the C++ locale machinery (a few hundred KiB of
// resident pages in an otherwise idle daemon).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace execd::fs {

// The file's bytes; nullopt when it cannot be opened or read, or is longer
// than `limit`.
std::optional<std::string> read_small_file(const std::string& path, size_t limit = 16u << 20);

// The same for a file kept open, from its start (pread(2): the descriptor's
// offset is left alone, and a /proc, /sys or cgroup file is rendered afresh).
std::optional<std::string> reread_small_file(int fd, size_t limit = 16u << 20);

// Writes all of `data` (again after EINTR and short writes); 0, or the errno
// of the write that failed (EAGAIN on a non-blocking descriptor that is
// full). Some bytes may have gone out before a failure.
int write_all(int fd, std::string_view data);

}  // namespace execd::fs
