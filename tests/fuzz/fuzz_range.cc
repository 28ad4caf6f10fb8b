// Fuzz target: the Range header parser against file sizes chosen by the
// fuzzer. A satisfiable answer always names bytes inside the file.
#include <cstdlib>
#include <cstring>

#include "protocol/range.h"

using namespace execd::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t file_size;
  std::memcpy(&file_size, data, 8);
  if (data[0] & 1) file_size %= 4096;  // small files get their share of inputs
  std::string_view header(reinterpret_cast<const char*>(data + 8), size - 8);
  RangeResult r = parse_range_header(header, file_size);
  if (r.outcome == RangeOutcome::satisfiable) {
    if (file_size == 0 || r.first > r.last || r.last >= file_size) std::abort();
    if (r.length() == 0 || r.length() > file_size) std::abort();
  }
  if (parse_range_header(std::nullopt, file_size).outcome != RangeOutcome::none) std::abort();
  return 0;
}
