// tests/fuzz/fuzz_input: how a fuzz target turns one input into the pieces a
// socket could have delivered. The first byte seeds the split sizes, so the
// fuzzer explores every split point without a second input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace fuzz {

class Splitter {
 public:
  Splitter(const uint8_t* data, size_t size) {
    if (size > 0) {
      state_ = data[0] | 1u;
      data_ = reinterpret_cast<const char*>(data + 1);
      size_ = size - 1;
    }
  }
  std::string_view all() const { return {data_, size_}; }
  // The input cut into pieces of 1..64 bytes (or whole, when the seed says so).
  std::vector<std::string_view> pieces() {
    std::vector<std::string_view> out;
    if (state_ % 7 == 0) {
      out.emplace_back(data_, size_);
      return out;
    }
    size_t at = 0;
    while (at < size_) {
      state_ = state_ * 1103515245u + 12345u;
      size_t n = 1 + (state_ >> 16) % 64;
      if (n > size_ - at) n = size_ - at;
      out.emplace_back(data_ + at, n);
      at += n;
    }
    return out;
  }

 private:
  uint32_t state_ = 1;
  const char* data_ = "";
  size_t size_ = 0;
};

// Splits at the first NUL: two independent strings from one input.
inline std::pair<std::string_view, std::string_view> two_parts(const uint8_t* data, size_t size) {
  std::string_view all(reinterpret_cast<const char*>(data), size);
  size_t nul = all.find('\0');
  if (nul == std::string_view::npos) return {all, {}};
  return {all.substr(0, nul), all.substr(nul + 1)};
}

}  // namespace fuzz
