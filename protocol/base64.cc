// Base64 encoder and strict decoder (see base64.h for the accepted syntax).
#include "protocol/base64.h"

#include <array>

namespace execd::protocol {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr uint8_t kInvalid = 0xFF;
constexpr uint8_t kPad = 0xFE;
constexpr uint8_t kSkip = 0xFD;  // '\r' and '\n', ignored like Go does

constexpr std::array<uint8_t, 256> make_decode_table() {
  std::array<uint8_t, 256> table{};
  for (auto& entry : table) entry = kInvalid;
  for (uint8_t i = 0; i < 64; ++i) table[static_cast<uint8_t>(kAlphabet[i])] = i;
  table['='] = kPad;
  table['\r'] = kSkip;
  table['\n'] = kSkip;
  return table;
}

constexpr std::array<uint8_t, 256> kDecodeTable = make_decode_table();

}  // namespace

void append_base64(std::string& out, const uint8_t* data, size_t len) {
  const size_t start = out.size();
  out.resize(start + (len + 2) / 3 * 4);
  char* o = out.data() + start;
  size_t i = 0;
  for (; i + 3 <= len; i += 3) {
    const uint32_t group = (uint32_t{data[i]} << 16) | (uint32_t{data[i + 1]} << 8) | data[i + 2];
    *o++ = kAlphabet[(group >> 18) & 63];
    *o++ = kAlphabet[(group >> 12) & 63];
    *o++ = kAlphabet[(group >> 6) & 63];
    *o++ = kAlphabet[group & 63];
  }
  const size_t rest = len - i;
  if (rest > 0) {
    uint32_t group = uint32_t{data[i]} << 16;
    if (rest == 2) group |= uint32_t{data[i + 1]} << 8;
    *o++ = kAlphabet[(group >> 18) & 63];
    *o++ = kAlphabet[(group >> 12) & 63];
    *o++ = rest == 2 ? kAlphabet[(group >> 6) & 63] : '=';
    *o++ = '=';
  }
}

std::string base64_encode(const uint8_t* data, size_t len) {
  std::string out;
  append_base64(out, data, len);
  return out;
}

std::string base64_encode(std::string_view bytes) {
  return base64_encode(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

std::optional<std::string> base64_decode(std::string_view text) {
  std::string out;
  out.reserve(base64_decoded_size_bound(text.size()));
  uint32_t group = 0;
  int group_chars = 0;   // significant characters collected in the current quantum
  int pad_chars = 0;     // '=' seen in the final quantum
  for (const char ch : text) {
    const uint8_t value = kDecodeTable[static_cast<uint8_t>(ch)];
    if (value == kSkip) continue;
    if (value == kInvalid) return std::nullopt;
    if (value == kPad) {
      // Padding may only complete a quantum that already has 2 or 3 characters.
      if (group_chars + pad_chars < 2) return std::nullopt;
      ++pad_chars;
      if (group_chars + pad_chars > 4) return std::nullopt;
      continue;
    }
    if (pad_chars > 0) return std::nullopt;  // data after padding
    group = (group << 6) | value;
    if (++group_chars == 4) {
      out.push_back(static_cast<char>((group >> 16) & 0xFF));
      out.push_back(static_cast<char>((group >> 8) & 0xFF));
      out.push_back(static_cast<char>(group & 0xFF));
      group = 0;
      group_chars = 0;
    }
  }
  if (pad_chars > 0) {
    if (group_chars + pad_chars != 4) return std::nullopt;
    if (group_chars == 2) {
      out.push_back(static_cast<char>((group >> 4) & 0xFF));
    } else {  // 3 characters: 18 bits, 16 of them data
      out.push_back(static_cast<char>((group >> 10) & 0xFF));
      out.push_back(static_cast<char>((group >> 2) & 0xFF));
    }
    return out;
  }
  if (group_chars != 0) return std::nullopt;  // unpadded tail
  return out;
}

}  // namespace execd::protocol
