// protocol/sha: SHA-1, SHA-256 and HMAC-SHA256, and their lowercase hex.
// Built on libcrypto's direct digest functions rather than EVP: EVP's
// provider machinery (config, algorithm tables) costs about 2 MiB of RSS the
// first time any digest runs and pulls ~2.9 MB into the static binary, for
// two fixed algorithms that need none of it. The direct functions use the
// same SHA-NI / AVX2 code.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace execd::protocol {

using Sha256Digest = std::array<uint8_t, 32>;
using Sha1Digest = std::array<uint8_t, 20>;

// Incremental SHA-256. The state is plain data; no allocation.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t len);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // Call once, after the last update.
  Sha256Digest finish();

 private:
  // Room for libcrypto's SHA256_CTX (112 bytes), kept opaque so that
  // includers need no OpenSSL headers; sha.cc checks the size.
  alignas(8) unsigned char state_[128];
};

Sha256Digest sha256(std::string_view data);
Sha1Digest sha1(std::string_view data);

// HMAC-SHA256 (RFC 2104) of the concatenation of `parts`, without copying them.
Sha256Digest hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts);

std::string lower_hex(const uint8_t* data, size_t len);
template <size_t N>
std::string lower_hex(const std::array<uint8_t, N>& d) {
  return lower_hex(d.data(), N);
}

// Lowercase hex SHA-256.
inline std::string sha256_hex(std::string_view data) { return lower_hex(sha256(data)); }

}  // namespace execd::protocol
