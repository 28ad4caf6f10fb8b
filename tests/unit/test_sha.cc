// Unit tests for protocol/sha: published vectors for SHA-1, SHA-256 and
// HMAC-SHA256 (RFC 4231, including a key longer than the block), and the
// incremental and multi-part paths agreeing with the one-shot ones.
#include <doctest/doctest.h>

#include <string>

#include "protocol/sha.h"

using namespace execd::protocol;

TEST_CASE("sha: FIPS 180 vectors") {
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(lower_hex(sha1("abc")) == "a9993e364706816aba3e25717850c26c9cd0d89d");
}

TEST_CASE("sha: incremental SHA-256 equals one shot, at every split") {
  const std::string text = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  for (size_t split = 0; split <= text.size(); ++split) {
    Sha256 h;
    h.update(text.substr(0, split));
    h.update(text.substr(split));
    CHECK(lower_hex(h.finish()) == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  }
}

TEST_CASE("sha: HMAC-SHA256, RFC 4231 cases 1, 2 and 6") {
  CHECK(lower_hex(hmac_sha256(std::string(20, '\x0b'), {"Hi There"})) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(lower_hex(hmac_sha256("Jefe", {"what do ya want ", "for nothing?"})) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  CHECK(lower_hex(hmac_sha256(std::string(131, '\xaa'), {"Test Using Larger Than Block-Size Key - Hash Key First"})) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST_CASE("sha: a 64-byte key is used as is, a 65-byte key is hashed first") {
  const std::string k64(64, 'k'), k65(65, 'k');
  CHECK(hmac_sha256(k64, {"m"}) != hmac_sha256(k65, {"m"}));
  const Sha256Digest hashed = sha256(k65);
  CHECK(hmac_sha256(k65, {"m"}) == hmac_sha256(std::string(hashed.begin(), hashed.end()), {"m"}));
}
