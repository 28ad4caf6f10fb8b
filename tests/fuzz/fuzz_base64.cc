// Fuzz target: base64. Decoding never crashes; whatever decodes re-encodes to a
// string that decodes to the same bytes; encoding always round-trips.
#include <cstdlib>
#include <string>

#include "protocol/base64.h"

using namespace execd::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string enc = base64_encode(data, size);
  std::string appended = "x";
  append_base64(appended, data, size);
  if (appended.substr(1) != enc) std::abort();
  auto dec = base64_decode(enc);
  if (!dec || *dec != in) std::abort();

  auto maybe = base64_decode(in);
  if (maybe) {
    if (maybe->size() > base64_decoded_size_bound(size)) std::abort();
    auto again = base64_decode(base64_encode(*maybe));
    if (!again || *again != *maybe) std::abort();
  }
  return 0;
}
