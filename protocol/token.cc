// protocol/token: see header.
#include "protocol/token.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

namespace execd::protocol {

bool token_equal(std::string_view expected, std::string_view given) {
  // Hash both sides first: the comparison then always covers 32 bytes, so
  // neither content nor length of the secret leaks through timing.
  unsigned char a[SHA256_DIGEST_LENGTH], b[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(expected.data()), expected.size(), a);
  SHA256(reinterpret_cast<const unsigned char*>(given.data()), given.size(), b);
  return CRYPTO_memcmp(a, b, sizeof a) == 0 && !expected.empty();
}

}  // namespace execd::protocol
