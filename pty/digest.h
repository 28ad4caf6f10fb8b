// pty/digest: the proof of what a process wrote to one stream: how many bytes
// and their SHA-256, computed as the bytes pass through.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "protocol/sha.h"

namespace execd::pty {

class OutputDigest {
 public:
  OutputDigest() = default;
  OutputDigest(const OutputDigest&) = delete;
  OutputDigest& operator=(const OutputDigest&) = delete;

  void update(const uint8_t* data, size_t len) {
    bytes_ += len;
    sha_.update(data, len);
  }
  uint64_t bytes() const { return bytes_; }
  // Lower-case hex; call once, after the last update.
  std::string finish_hex() { return protocol::lower_hex(sha_.finish()); }
  protocol::Sha256Digest finish() { return sha_.finish(); }

 private:
  protocol::Sha256 sha_;
  uint64_t bytes_ = 0;
};

}  // namespace execd::pty
