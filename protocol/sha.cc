// protocol/sha: see header.
#include "protocol/sha.h"

#include <openssl/sha.h>

#include <cstring>

namespace execd::protocol {

static_assert(sizeof(SHA256_CTX) <= 128 && alignof(SHA256_CTX) <= 8);

namespace {
SHA256_CTX* ctx_of(unsigned char* state) { return reinterpret_cast<SHA256_CTX*>(state); }
}  // namespace

Sha256::Sha256() { SHA256_Init(ctx_of(state_)); }

void Sha256::update(const void* data, size_t len) { SHA256_Update(ctx_of(state_), data, len); }

Sha256Digest Sha256::finish() {
  Sha256Digest d;
  SHA256_Final(d.data(), ctx_of(state_));
  return d;
}

Sha256Digest sha256(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.finish();
}

Sha1Digest sha1(std::string_view data) {
  SHA_CTX ctx;
  SHA1_Init(&ctx);
  SHA1_Update(&ctx, data.data(), data.size());
  Sha1Digest d;
  SHA1_Final(d.data(), &ctx);
  return d;
}

Sha256Digest hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts) {
  constexpr size_t kBlock = 64;
  unsigned char block[kBlock] = {};
  if (key.size() > kBlock) {
    const Sha256Digest k = sha256(key);
    std::memcpy(block, k.data(), k.size());
  } else {
    std::memcpy(block, key.data(), key.size());
  }
  unsigned char pad[kBlock];
  for (size_t i = 0; i < kBlock; ++i) pad[i] = block[i] ^ 0x36;
  Sha256 inner;
  inner.update(pad, kBlock);
  for (std::string_view part : parts) inner.update(part);
  const Sha256Digest inner_digest = inner.finish();
  for (size_t i = 0; i < kBlock; ++i) pad[i] = block[i] ^ 0x5c;
  Sha256 outer;
  outer.update(pad, kBlock);
  outer.update(inner_digest.data(), inner_digest.size());
  return outer.finish();
}

std::string lower_hex(const uint8_t* data, size_t len) {
  static const char digits[] = "0123456789abcdef";
  std::string s(len * 2, '0');
  for (size_t i = 0; i < len; ++i) {
    s[2 * i] = digits[data[i] >> 4];
    s[2 * i + 1] = digits[data[i] & 15];
  }
  return s;
}

}  // namespace execd::protocol
