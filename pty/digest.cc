// pty/digest: see header.
#include "pty/digest.h"

#include <openssl/evp.h>

namespace execd::pty {

namespace {
// Fetched once: EVP_sha256() makes every init look the algorithm up in the
// provider tables again (two digests per command, on the loop thread).
const EVP_MD* sha256() {
  static EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  return md ? md : EVP_sha256();
}
}  // namespace

OutputDigest::OutputDigest() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, sha256(), nullptr); }

OutputDigest::~OutputDigest() { EVP_MD_CTX_free(ctx_); }

void OutputDigest::update(const uint8_t* data, size_t len) {
  bytes_ += len;
  EVP_DigestUpdate(ctx_, data, len);
}

std::string OutputDigest::finish_hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx_, md, &n);
  static const char k[] = "0123456789abcdef";
  std::string s(n * 2, '0');
  for (unsigned i = 0; i < n; ++i) {
    s[2 * i] = k[md[i] >> 4];
    s[2 * i + 1] = k[md[i] & 15];
  }
  return s;
}

}  // namespace execd::pty
