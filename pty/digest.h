// pty/digest: the proof of what a process wrote to one stream: how many bytes
// and their SHA-256, computed as the bytes pass through.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

typedef struct evp_md_ctx_st EVP_MD_CTX;

namespace execd::pty {

class OutputDigest {
 public:
  OutputDigest();
  ~OutputDigest();
  OutputDigest(const OutputDigest&) = delete;
  OutputDigest& operator=(const OutputDigest&) = delete;

  void update(const uint8_t* data, size_t len);
  uint64_t bytes() const { return bytes_; }
  // Lower-case hex; call once, after the last update.
  std::string finish_hex();

 private:
  EVP_MD_CTX* ctx_;
  uint64_t bytes_ = 0;
};

}  // namespace execd::pty
