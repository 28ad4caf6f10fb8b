// Base64 (RFC 4648 standard alphabet, '=' padding): encoding and strict decoding.
// Used by the WebSocket handshake (Sec-WebSocket-Key / Sec-WebSocket-Accept) and by
// any endpoint that carries binary data inside JSON.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace execd::protocol {

// Appends the encoding of `len` bytes (standard alphabet, '=' padding) to
// `out` without an intermediate string: the exact framing's hot path.
void append_base64(std::string& out, const uint8_t* data, size_t len);

// Encodes `len` bytes with the standard alphabet and '=' padding.
std::string base64_encode(const uint8_t* data, size_t len);
std::string base64_encode(std::string_view bytes);

// Decodes standard-alphabet base64. Mirrors Go's base64.StdEncoding.DecodeString (the
// reference implementation's decoder): padding is required (length of the significant
// characters must be a multiple of 4), '\r' and '\n' anywhere are ignored, any other
// character outside the alphabet, misplaced '=' or data after the padding is an error.
// Like Go's non-strict mode, non-zero bits in the last character's unused low bits are
// tolerated. Returns std::nullopt on malformed input.
std::optional<std::string> base64_decode(std::string_view text);

// Upper bound of the decoded size for `encoded_len` input characters.
constexpr size_t base64_decoded_size_bound(size_t encoded_len) { return encoded_len / 4 * 3 + 3; }

}  // namespace execd::protocol
