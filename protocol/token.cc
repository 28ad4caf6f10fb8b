// protocol/token: see header.
#include "protocol/token.h"

#include <openssl/crypto.h>

#include "protocol/sha.h"

namespace execd::protocol {

bool token_equal(std::string_view expected, std::string_view given) {
  // Hash both sides first: the comparison then always covers 32 bytes, so
  // neither content nor length of the secret leaks through timing.
  const Sha256Digest a = sha256(expected);
  const Sha256Digest b = sha256(given);
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0 && !expected.empty();
}

}  // namespace execd::protocol
