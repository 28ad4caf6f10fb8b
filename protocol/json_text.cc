// protocol/json_text: see header.
#include "protocol/json_text.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <cstring>

namespace execd::protocol {
namespace {

// 0 = copy as is, 1 = needs escaping (ASCII), 2 = non-ASCII lead/continuation
// byte (inspect for U+0085/2028/2029 or invalid sequences).
constexpr uint8_t kNone = 0, kEscape = 1, kHigh = 2;

struct ClassTable {
  uint8_t v[256];
  constexpr ClassTable() : v() {
    for (int i = 0; i < 256; ++i) v[i] = i < 0x20 ? kEscape : (i >= 0x80 ? kHigh : kNone);
    v[static_cast<uint8_t>('"')] = kEscape;
    v[static_cast<uint8_t>('\\')] = kEscape;
  }
};
constexpr ClassTable kClass;

const char kHex[] = "0123456789abcdef";

void append_ascii_escape(std::string& out, uint8_t c) {
  switch (c) {
    case '"': out += "\\\""; return;
    case '\\': out += "\\\\"; return;
    case '\n': out += "\\n"; return;
    case '\r': out += "\\r"; return;
    case '\t': out += "\\t"; return;
    case '\b': out += "\\b"; return;
    case '\f': out += "\\f"; return;
    default: {
      char buf[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
      out.append(buf, 6);
    }
  }
}

// Decodes one UTF-8 sequence at p (len bytes available). Returns its length,
// or 0 if invalid or incomplete. Rejects overlongs, surrogates, > U+10FFFF.
size_t decode_utf8(const uint8_t* p, size_t len, uint32_t& cp) {
  uint8_t b0 = p[0];
  if (b0 < 0x80) { cp = b0; return 1; }
  if (b0 < 0xC2) return 0;
  if (b0 < 0xE0) {
    if (len < 2 || (p[1] & 0xC0) != 0x80) return 0;
    cp = ((b0 & 0x1Fu) << 6) | (p[1] & 0x3Fu);
    return 2;
  }
  if (b0 < 0xF0) {
    if (len < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
    if (b0 == 0xE0 && p[1] < 0xA0) return 0;
    if (b0 == 0xED && p[1] > 0x9F) return 0;
    cp = ((b0 & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
    return 3;
  }
  if (b0 < 0xF5) {
    if (len < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
    if (b0 == 0xF0 && p[1] < 0x90) return 0;
    if (b0 == 0xF4 && p[1] > 0x8F) return 0;
    cp = ((b0 & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
    return 4;
  }
  return 0;
}

// True if any of the 8 bytes in `w` is a control byte, '"', '\\' or non-ASCII:
// lets the common case skip a whole word at a time.
inline bool word_needs_attention(uint64_t w) {
  constexpr uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
  auto has_zero = [&](uint64_t x) { return (x - ones) & ~x & highs; };
  uint64_t below_space = (w - ones * 0x20) & ~w & highs;
  return (w & highs) | below_space | has_zero(w ^ (ones * '"')) | has_zero(w ^ (ones * '\\'));
}

#if defined(__SSE2__)
// Index of the first byte at or after `i` that is a control byte, '"', '\\'
// or non-ASCII, 16 bytes at a time; `n` when there is none.
inline size_t skip_plain_sse2(const uint8_t* p, size_t i, size_t n) {
  const __m128i space = _mm_set1_epi8(0x20), quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
  while (i + 16 <= n) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    // Signed compare: bytes >= 0x80 are negative, so they count as "below space" too.
    __m128i hit = _mm_or_si128(_mm_cmplt_epi8(v, space),
                               _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)));
    int mask = _mm_movemask_epi8(hit);
    if (mask != 0) return i + static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(mask)));
    i += 16;
  }
  return i;
}
#endif

template <bool Lossy>
void append_string_impl(std::string& out, std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  out.reserve(out.size() + n + 2);
  out.push_back('"');
  size_t run_start = 0, i = 0;
  while (i < n) {
#if defined(__SSE2__)
    i = skip_plain_sse2(p, i, n);
    if (i >= n) break;
#endif
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if (!word_needs_attention(w)) {
        i += 8;
        continue;
      }
    }
    uint8_t cls = kClass.v[p[i]];
    if (cls == kNone) { ++i; continue; }
    if (cls == kEscape) {
      out.append(s.data() + run_start, i - run_start);
      append_ascii_escape(out, p[i]);
      run_start = ++i;
      continue;
    }
    uint32_t cp = 0;
    size_t len = decode_utf8(p + i, n - i, cp);
    if (len == 0) {
      out.append(s.data() + run_start, i - run_start);
      if constexpr (Lossy) out += "\xEF\xBF\xBD";
      run_start = ++i;
      continue;
    }
    if (cp == 0x85 || cp == 0x2028 || cp == 0x2029) {
      out.append(s.data() + run_start, i - run_start);
      char buf[6] = {'\\', 'u', kHex[(cp >> 12) & 15], kHex[(cp >> 8) & 15], kHex[(cp >> 4) & 15], kHex[cp & 15]};
      out.append(buf, 6);
      i += len;
      run_start = i;
      continue;
    }
    i += len;
  }
  out.append(s.data() + run_start, n - run_start);
  out.push_back('"');
}

}  // namespace

void append_json_string(std::string& out, std::string_view s) { append_string_impl<false>(out, s); }
void append_json_string_lossy(std::string& out, std::string_view s) { append_string_impl<true>(out, s); }

size_t utf8_valid_prefix(const uint8_t* data, size_t len) {
  size_t i = 0;
  while (i < len) {
    // Fast path over ASCII, 8 bytes at a time.
    while (i + 8 <= len) {
      uint64_t w;
      std::memcpy(&w, data + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= len) break;
    if (data[i] < 0x80) { ++i; continue; }
    uint32_t cp;
    size_t l = decode_utf8(data + i, len - i, cp);
    if (l == 0) return i;
    i += l;
  }
  return len;
}

size_t utf8_incomplete_tail(const uint8_t* data, size_t len) {
  // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
  for (size_t back = 1; back <= 3 && back <= len; ++back) {
    uint8_t b = data[len - back];
    if ((b & 0xC0) == 0x80) continue;  // continuation byte, keep looking
    size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 ? 2 : 0;
    if (need == 0 || b >= 0xF5 || need <= back) return 0;
    // Check the bytes present are a valid start of that sequence.
    uint8_t tmp[4] = {b, 0x80, 0x80, 0x80};
    for (size_t k = 1; k < back; ++k) tmp[k] = data[len - back + k];
    // Pad with the smallest continuation that keeps range checks honest.
    if (back == 1) {
      if (b == 0xE0) tmp[1] = 0xA0;
      if (b == 0xF0) tmp[1] = 0x90;
    }
    uint32_t cp;
    return decode_utf8(tmp, need, cp) == need ? back : 0;
  }
  return 0;
}

bool utf8_valid(std::string_view s) {
  return utf8_valid_prefix(reinterpret_cast<const uint8_t*>(s.data()), s.size()) == s.size();
}

}  // namespace execd::protocol
