// RFC 6455 server side: handshake validation, client-frame parser, server-frame
// encoders. See websocket.h for the contract of each piece.
#include "protocol/websocket.h"

#include "protocol/http.h"
#include "protocol/json_text.h"


#include <algorithm>
#include <cstring>
#include <utility>

#include "protocol/base64.h"
#include "protocol/sha.h"

namespace execd::protocol {
namespace {

constexpr std::string_view kWebSocketGuid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

bool is_optional_whitespace(char ch) { return ch == ' ' || ch == '\t'; }

std::string_view trim_optional_whitespace(std::string_view text) {
  while (!text.empty() && is_optional_whitespace(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_optional_whitespace(text.back())) text.remove_suffix(1);
  return text;
}

bool lookup_has_token(const HeaderLookup& header, std::string_view name, std::string_view token) {
  const std::optional<std::string_view> value = header(name);
  return value && header_has_token(*value, token);
}

std::string_view status_text(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 405: return "Method Not Allowed";
    case 426: return "Upgrade Required";
    default: return "Error";
  }
}

HandshakeResult refuse(int status, std::string error) {
  HandshakeResult result;
  result.status = status;
  result.error = std::move(error);
  // Same body as gorilla's http.Error(w, http.StatusText(status), status).
  const std::string body = std::string(status_text(status)) + "\n";
  std::string& out = result.response;
  out = "HTTP/1.1 " + std::to_string(status) + " " + std::string(status_text(status)) + "\r\n";
  out += "Content-Type: text/plain; charset=utf-8\r\n";
  out += "X-Content-Type-Options: nosniff\r\n";
  // gorilla sets it on every refusal; RFC 6455 4.4 requires it for a version mismatch.
  out += "Sec-WebSocket-Version: 13\r\n";
  if (status == 426) out += "Upgrade: websocket\r\n";  // RFC 9110 15.5.22
  out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  out += "Connection: close\r\n\r\n";
  out += body;
  return result;
}

bool is_control(WsOpcode opcode) { return (static_cast<uint8_t>(opcode) & 0x8) != 0; }

bool is_known_opcode(uint8_t opcode) {
  return opcode <= 0x2 || (opcode >= 0x8 && opcode <= 0xA);
}

// Number of bytes of `text` (at most `limit`) that end on a UTF-8 character boundary.
size_t utf8_prefix_within(std::string_view text, size_t limit) {
  if (text.size() <= limit) return text.size();
  size_t cut = limit;
  // Back off continuation bytes so the cut never splits a character.
  while (cut > 0 && (static_cast<uint8_t>(text[cut]) & 0xC0) == 0x80) --cut;
  return cut;
}

std::string encode_whole_frame(WsOpcode opcode, std::string_view payload) {
  const WsFrameHeader header = encode_frame_header(opcode, payload.size());
  std::string frame;
  frame.reserve(header.size + payload.size());
  frame.append(header.view());
  frame.append(payload);
  return frame;
}

}  // namespace

// ---------------------------------------------------------------------------
// Handshake
// ---------------------------------------------------------------------------

bool header_has_token(std::string_view value, std::string_view token) {
  while (true) {
    const size_t comma = value.find(',');
    const std::string_view item = trim_optional_whitespace(value.substr(0, comma));
    if (equals_ignoring_ascii_case(item, token)) return true;
    if (comma == std::string_view::npos) return false;
    value.remove_prefix(comma + 1);
  }
}

std::string websocket_accept_key(std::string_view client_key) {
  std::string input;
  input.reserve(client_key.size() + kWebSocketGuid.size());
  input.append(client_key);
  input.append(kWebSocketGuid);
  const Sha1Digest digest = sha1(input);
  return base64_encode(digest.data(), digest.size());
}

bool is_websocket_upgrade(const HeaderLookup& header) {
  return lookup_has_token(header, "Connection", "upgrade") &&
         lookup_has_token(header, "Upgrade", "websocket");
}

HandshakeResult check_websocket_upgrade(std::string_view method, const HeaderLookup& header) {
  constexpr std::string_view kNotWebSocket =
      "websocket: the client is not using the websocket protocol: ";
  if (!lookup_has_token(header, "Connection", "upgrade")) {
    return refuse(400, std::string(kNotWebSocket) + "'upgrade' token not found in 'Connection' header");
  }
  if (!lookup_has_token(header, "Upgrade", "websocket")) {
    return refuse(400, std::string(kNotWebSocket) + "'websocket' token not found in 'Upgrade' header");
  }
  if (method != "GET") {
    return refuse(405, std::string(kNotWebSocket) + "request method is not GET");
  }
  if (!lookup_has_token(header, "Sec-WebSocket-Version", "13")) {
    return refuse(426, "websocket: unsupported version: 13 not found in 'Sec-Websocket-Version' header");
  }
  const std::optional<std::string_view> raw_key = header("Sec-WebSocket-Key");
  const std::string_view key = raw_key ? trim_optional_whitespace(*raw_key) : std::string_view{};
  const std::optional<std::string> decoded_key = base64_decode(key);
  if (key.empty() || !decoded_key || decoded_key->size() != 16) {
    return refuse(400,
                  "websocket: not a websocket handshake: 'Sec-WebSocket-Key' header must be Base64 "
                  "encoded value of 16-byte in length");
  }
  HandshakeResult result;
  result.accepted = true;
  result.status = 101;
  result.response =
      "HTTP/1.1 101 Switching Protocols\r\n"
      "Upgrade: websocket\r\n"
      "Connection: Upgrade\r\n"
      "Sec-WebSocket-Accept: " +
      websocket_accept_key(key) + "\r\n\r\n";
  return result;
}

// ---------------------------------------------------------------------------
// UTF-8
// ---------------------------------------------------------------------------

bool Utf8Validator::feed(const uint8_t* data, size_t len) {
  for (size_t i = 0; i < len; ++i) {
    const uint8_t byte = data[i];
    if (pending_continuations_ > 0) {
      if (byte < next_min_ || byte > next_max_) return false;
      --pending_continuations_;
      next_min_ = 0x80;
      next_max_ = 0xBF;
      continue;
    }
    if (byte < 0x80) continue;
    // Lead byte: how many continuations follow, and the narrowed range of the first
    // one, which is what excludes overlongs (E0, F0), surrogates (ED) and > U+10FFFF (F4).
    if (byte >= 0xC2 && byte <= 0xDF) {
      pending_continuations_ = 1;
    } else if (byte >= 0xE0 && byte <= 0xEF) {
      pending_continuations_ = 2;
      if (byte == 0xE0) next_min_ = 0xA0;
      if (byte == 0xED) next_max_ = 0x9F;
    } else if (byte >= 0xF0 && byte <= 0xF4) {
      pending_continuations_ = 3;
      if (byte == 0xF0) next_min_ = 0x90;
      if (byte == 0xF4) next_max_ = 0x8F;
    } else {
      return false;  // stray continuation, C0/C1 overlong lead, or F5..FF
    }
  }
  return true;
}

bool is_valid_utf8(std::string_view text) { return utf8_valid(text); }

bool is_valid_received_close_code(uint16_t code) {
  if (code >= 3000 && code <= 4999) return true;
  if (code >= 1000 && code <= 1003) return true;
  return code >= 1007 && code <= 1014;
}

// ---------------------------------------------------------------------------
// Parser
// ---------------------------------------------------------------------------

void WsFrameParser::emit(WsEvent::Kind kind, std::string payload, uint16_t code) {
  events_.push_back(WsEvent{kind, std::move(payload), code});
}

void WsFrameParser::fail(uint16_t code, std::string reason) {
  emit(WsEvent::Kind::error, std::move(reason), code);
  state_ = State::finished;
  message_.clear();
  message_.shrink_to_fit();
  control_.clear();
}

bool WsFrameParser::next_event(WsEvent& out) {
  if (events_.empty()) return false;
  out = std::move(events_.front());
  events_.pop_front();
  return true;
}

void WsFrameParser::feed(const uint8_t* data, size_t len) {
  while (len > 0 && state_ != State::finished) {
    if (state_ == State::payload) {
      const uint64_t remaining = payload_length_ - payload_received_;
      const size_t take = static_cast<size_t>(std::min<uint64_t>(remaining, len));
      consume_payload(data, take);
      data += take;
      len -= take;
      if (state_ == State::payload && payload_received_ == payload_length_) finish_frame();
      continue;
    }

    // State::header: collect bytes until the whole header (incl. mask key) is here.
    const size_t take = std::min(header_need_ - header_have_, len);
    std::memcpy(header_bytes_ + header_have_, data, take);
    header_have_ += take;
    data += take;
    len -= take;
    if (header_have_ < header_need_) continue;

    if (header_have_ == 2) {
      // First two bytes: everything that can be rejected without the length.
      const uint8_t b0 = header_bytes_[0];
      const uint8_t b1 = header_bytes_[1];
      fin_ = (b0 & 0x80) != 0;
      if ((b0 & 0x70) != 0) {
        fail(ws_close::protocol_error, "reserved bits set without a negotiated extension");
        return;
      }
      if (!is_known_opcode(b0 & 0x0F)) {
        fail(ws_close::protocol_error, "unknown opcode");
        return;
      }
      opcode_ = static_cast<WsOpcode>(b0 & 0x0F);
      if ((b1 & 0x80) == 0) {
        fail(ws_close::protocol_error, "client frame is not masked");
        return;
      }
      const uint8_t length7 = b1 & 0x7F;
      if (is_control(opcode_)) {
        if (!fin_) {
          fail(ws_close::protocol_error, "fragmented control frame");
          return;
        }
        if (length7 > 125) {
          fail(ws_close::protocol_error, "control frame payload longer than 125 bytes");
          return;
        }
      } else if (opcode_ == WsOpcode::continuation) {
        if (!in_message_) {
          fail(ws_close::protocol_error, "continuation frame without a message in progress");
          return;
        }
      } else if (in_message_) {
        fail(ws_close::protocol_error, "new data frame while a fragmented message is in progress");
        return;
      }
      const size_t extended = length7 == 126 ? 2 : (length7 == 127 ? 8 : 0);
      header_need_ = 2 + extended + 4;
      continue;
    }

    // Whole header present.
    const uint8_t length7 = header_bytes_[1] & 0x7F;
    size_t pos = 2;
    if (length7 == 126) {
      payload_length_ = (uint64_t{header_bytes_[2]} << 8) | header_bytes_[3];
      pos = 4;
    } else if (length7 == 127) {
      if ((header_bytes_[2] & 0x80) != 0) {
        fail(ws_close::protocol_error, "64-bit payload length has its most significant bit set");
        return;
      }
      payload_length_ = 0;
      for (size_t i = 0; i < 8; ++i) payload_length_ = (payload_length_ << 8) | header_bytes_[2 + i];
      pos = 10;
    } else {
      payload_length_ = length7;
    }
    std::memcpy(mask_, header_bytes_ + pos, 4);
    start_frame_payload();
  }
}

void WsFrameParser::start_frame_payload() {
  payload_received_ = 0;
  if (is_control(opcode_)) {
    control_.clear();
  } else {
    const uint64_t already = opcode_ == WsOpcode::continuation ? message_.size() : 0;
    // Checked before buffering anything, so an oversized message never costs memory.
    if (payload_length_ > limits_.max_message_size ||
        already > limits_.max_message_size - payload_length_) {
      fail(ws_close::message_too_big, "message exceeds the maximum size");
      return;
    }
    if (opcode_ != WsOpcode::continuation) {
      in_message_ = true;
      message_opcode_ = opcode_;
      message_.clear();
      message_utf8_.reset();
    }
    message_.reserve(static_cast<size_t>(already + payload_length_));
  }
  state_ = State::payload;
  if (payload_length_ == 0) finish_frame();
}

void WsFrameParser::consume_payload(const uint8_t* data, size_t len) {
  if (len == 0) return;
  std::string& target = is_control(opcode_) ? control_ : message_;
  const size_t start = target.size();
  target.resize(start + len);
  char* out = target.data() + start;
  const size_t mask_phase = static_cast<size_t>(payload_received_ & 3);
  size_t i = 0;
  // Word-at-a-time unmasking for large payloads: the key rotated to this phase,
  // repeated to 8 bytes (byte order does not matter since both sides use memcpy).
  if (len >= 16) {
    uint8_t rotated[8];
    for (size_t k = 0; k < 8; ++k) rotated[k] = mask_[(mask_phase + k) & 3];
    uint64_t key;
    std::memcpy(&key, rotated, 8);
    for (; i + 8 <= len; i += 8) {
      uint64_t word;
      std::memcpy(&word, data + i, 8);
      word ^= key;
      std::memcpy(out + i, &word, 8);
    }
  }
  for (; i < len; ++i) {
    out[i] = static_cast<char>(data[i] ^ mask_[(mask_phase + i) & 3]);
  }
  payload_received_ += len;
  if (!is_control(opcode_) && message_opcode_ == WsOpcode::text &&
      !message_utf8_.feed(reinterpret_cast<const uint8_t*>(out), len)) {
    fail(ws_close::invalid_payload, "text message is not valid UTF-8");
  }
}

void WsFrameParser::finish_frame() {
  // Ready for the next frame header.
  state_ = State::header;
  header_have_ = 0;
  header_need_ = 2;

  switch (opcode_) {
    case WsOpcode::ping:
      emit(WsEvent::Kind::ping, std::move(control_));
      control_.clear();
      return;
    case WsOpcode::pong:
      emit(WsEvent::Kind::pong, std::move(control_));
      control_.clear();
      return;
    case WsOpcode::close: {
      if (control_.empty()) {
        emit(WsEvent::Kind::close, {}, ws_close::no_status);
        state_ = State::finished;
        return;
      }
      if (control_.size() == 1) {
        fail(ws_close::protocol_error, "close frame payload of 1 byte");
        return;
      }
      const uint16_t code = static_cast<uint16_t>((static_cast<uint8_t>(control_[0]) << 8) |
                                                  static_cast<uint8_t>(control_[1]));
      if (!is_valid_received_close_code(code)) {
        fail(ws_close::protocol_error, "invalid close code " + std::to_string(code));
        return;
      }
      std::string reason = control_.substr(2);
      if (!is_valid_utf8(reason)) {
        fail(ws_close::protocol_error, "close reason is not valid UTF-8");
        return;
      }
      emit(WsEvent::Kind::close, std::move(reason), code);
      state_ = State::finished;
      return;
    }
    case WsOpcode::continuation:
    case WsOpcode::text:
    case WsOpcode::binary:
      break;
  }
  if (!fin_) return;
  const bool is_text = message_opcode_ == WsOpcode::text;
  // A message may not end inside a multi-byte character.
  if (is_text && !message_utf8_.at_boundary()) {
    fail(ws_close::invalid_payload, "text message ends with an incomplete UTF-8 sequence");
    return;
  }
  in_message_ = false;
  emit(is_text ? WsEvent::Kind::text : WsEvent::Kind::binary, std::move(message_));
  message_ = std::string();
}

// ---------------------------------------------------------------------------
// Encoders
// ---------------------------------------------------------------------------

WsFrameHeader encode_frame_header(WsOpcode opcode, uint64_t payload_len, bool fin) {
  WsFrameHeader header;
  header.bytes[0] = static_cast<uint8_t>((fin ? 0x80 : 0x00) | static_cast<uint8_t>(opcode));
  if (payload_len <= 125) {
    header.bytes[1] = static_cast<uint8_t>(payload_len);
    header.size = 2;
  } else if (payload_len <= 0xFFFF) {
    header.bytes[1] = 126;
    header.bytes[2] = static_cast<uint8_t>(payload_len >> 8);
    header.bytes[3] = static_cast<uint8_t>(payload_len);
    header.size = 4;
  } else {
    header.bytes[1] = 127;
    for (int i = 0; i < 8; ++i) header.bytes[2 + i] = static_cast<uint8_t>(payload_len >> (56 - 8 * i));
    header.size = 10;
  }
  return header;
}

WsFrameHeader encode_binary_header_with_prefix(uint8_t prefix, uint64_t payload_len) {
  WsFrameHeader header = encode_frame_header(WsOpcode::binary, payload_len + 1);
  header.bytes[header.size++] = prefix;
  return header;
}

std::string encode_text_frame(std::string_view text) { return encode_whole_frame(WsOpcode::text, text); }

std::string encode_binary_frame(std::string_view payload) {
  return encode_whole_frame(WsOpcode::binary, payload);
}

std::string encode_binary_frame(uint8_t prefix, std::string_view payload) {
  const WsFrameHeader header = encode_binary_header_with_prefix(prefix, payload.size());
  std::string frame;
  frame.reserve(header.size + payload.size());
  frame.append(header.view());
  frame.append(payload);
  return frame;
}

std::string encode_ping_frame(std::string_view payload) {
  return encode_whole_frame(WsOpcode::ping, payload.substr(0, 125));
}

std::string encode_pong_frame(std::string_view payload) {
  return encode_whole_frame(WsOpcode::pong, payload.substr(0, 125));
}

std::string encode_close_frame(uint16_t code, std::string_view reason) {
  if (code == ws_close::no_status) return encode_whole_frame(WsOpcode::close, {});
  std::string payload;
  payload.push_back(static_cast<char>(code >> 8));
  payload.push_back(static_cast<char>(code & 0xFF));
  payload.append(reason.substr(0, utf8_prefix_within(reason, 123)));
  return encode_whole_frame(WsOpcode::close, payload);
}

std::string encode_masked_frame(WsOpcode opcode, std::string_view payload, const uint8_t mask[4],
                                bool fin, uint8_t rsv_bits) {
  WsFrameHeader header = encode_frame_header(opcode, payload.size(), fin);
  header.bytes[0] |= static_cast<uint8_t>((rsv_bits & 0x7) << 4);
  header.bytes[1] |= 0x80;
  std::string frame;
  frame.reserve(header.size + 4 + payload.size());
  frame.append(header.view());
  frame.append(reinterpret_cast<const char*>(mask), 4);
  for (size_t i = 0; i < payload.size(); ++i) {
    frame.push_back(static_cast<char>(static_cast<uint8_t>(payload[i]) ^ mask[i & 3]));
  }
  return frame;
}

}  // namespace execd::protocol
