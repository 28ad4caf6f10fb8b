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

// Writes the escape of ASCII byte `c` at `d` (room for 6); returns the end.
char* put_ascii_escape(char* d, uint8_t c) {
  char e = 0;
  switch (c) {
    case '"': e = '"'; break;
    case '\\': e = '\\'; break;
    case '\n': e = 'n'; break;
    case '\r': e = 'r'; break;
    case '\t': e = 't'; break;
    case '\b': e = 'b'; break;
    case '\f': e = 'f'; break;
    default: {
      const char u[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
      std::memcpy(d, u, 6);
      return d + 6;
    }
  }
  d[0] = '\\';
  d[1] = e;
  return d + 2;
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

// Copies plain bytes from p[i] to d until the first byte that is a control
// byte, '"', '\\' or non-ASCII (or fewer than a block remain), a block at a
// time. A block is stored whole even when it holds such a byte (only the
// plain ones count): the caller keeps kSlack bytes of room past `d`.
constexpr size_t kSlack = 32;
inline void copy_plain(const uint8_t* p, size_t& i, size_t n, char*& d, const char* room_end) {
#if defined(__SSE2__)
  const __m128i space = _mm_set1_epi8(0x20), quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
  while (i + 16 <= n && d + kSlack <= room_end) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d), v);
    // Signed compare: bytes >= 0x80 are negative, so they count as "below space" too.
    __m128i hit = _mm_or_si128(_mm_cmplt_epi8(v, space),
                               _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)));
    int mask = _mm_movemask_epi8(hit);
    if (mask != 0) {
      size_t k = static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(mask)));
      i += k;
      d += k;
      return;
    }
    i += 16;
    d += 16;
  }
#else
  while (i + 8 <= n && d + kSlack <= room_end) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    if (word_needs_attention(w)) return;
    std::memcpy(d, &w, 8);
    i += 8;
    d += 8;
  }
#endif
}

// Writes straight into `out`'s characters (sized for the common case of few
// escapes, grown when an escape needs more) instead of appending run by run:
// exact framing escapes every line's newline, and the calls per run took a
// quarter of the writer's time on streamed base64 lines.
template <bool Lossy>
void append_string_impl(std::string& out, std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  const size_t base = out.size();
  out.resize(base + n + n / 8 + 2 + kSlack);
  char* d = out.data() + base;
  const char* room_end = out.data() + out.size();
  *d++ = '"';
  size_t i = 0;
  while (i < n) {
    if (d + kSlack > room_end) {
      size_t at = static_cast<size_t>(d - out.data());
      out.resize(out.size() + (n - i) + (n - i) / 8 + kSlack);
      d = out.data() + at;
      room_end = out.data() + out.size();
    }
    copy_plain(p, i, n, d, room_end);
    if (i >= n || d + kSlack > room_end) continue;
    uint8_t c = p[i];
    uint8_t cls = kClass.v[c];
    if (cls == kNone) {
      *d++ = static_cast<char>(c);
      ++i;
      continue;
    }
    if (cls == kEscape) {
      d = put_ascii_escape(d, c);
      ++i;
      continue;
    }
    uint32_t cp = 0;
    size_t len = decode_utf8(p + i, n - i, cp);
    if (len == 0) {  // invalid: dropped, or U+FFFD when lossy
      if constexpr (Lossy) {
        std::memcpy(d, "\xEF\xBF\xBD", 3);
        d += 3;
      }
      ++i;
      continue;
    }
    if (cp == 0x85 || cp == 0x2028 || cp == 0x2029) {
      const char u[6] = {'\\', 'u', kHex[(cp >> 12) & 15], kHex[(cp >> 8) & 15], kHex[(cp >> 4) & 15], kHex[cp & 15]};
      std::memcpy(d, u, 6);
      d += 6;
    } else {
      std::memcpy(d, p + i, len);
      d += len;
    }
    i += len;
  }
  *d++ = '"';
  out.resize(static_cast<size_t>(d - out.data()));
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
