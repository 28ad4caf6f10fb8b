// OpenSandbox PTY WebSocket protocol helpers (see pty_frames.h).
#include "protocol/pty_frames.h"

#include "protocol/http.h"

#include <csignal>
#include <limits>
#include <nlohmann/json.hpp>

namespace execd::protocol {
namespace {

using Json = nlohmann::ordered_json;  // keeps fields in the Go struct's order

constexpr char kLowerHex[] = "0123456789abcdef";

// Serializes like Go's json.Encoder with its default SetEscapeHTML(true).
std::string go_encoder_json(const Json& value) {
  // replace: invalid UTF-8 becomes U+FFFD instead of throwing, as in Go.
  const std::string dumped = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::string out;
  out.reserve(dumped.size() + 8);
  // '<', '>', '&' and U+2028/U+2029 can only occur inside strings here, so a plain
  // byte scan is safe.
  for (size_t i = 0; i < dumped.size(); ++i) {
    const char ch = dumped[i];
    if (ch == '<') {
      out += "\\u003c";
    } else if (ch == '>') {
      out += "\\u003e";
    } else if (ch == '&') {
      out += "\\u0026";
    } else if (ch == '\xe2' && i + 2 < dumped.size() && dumped[i + 1] == '\x80' &&
               (dumped[i + 2] == '\xa8' || dumped[i + 2] == '\xa9')) {
      out += dumped[i + 2] == '\xa8' ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      out += ch;
    }
  }
  out += '\n';
  return out;
}

// Decodes one UTF-8 sequence at `text[i]`; returns the code point and its length,
// or length 0 for an invalid sequence.
std::pair<uint32_t, size_t> decode_utf8(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t lead = byte(i);
  if (lead < 0x80) return {lead, 1};
  size_t length = 0;
  uint32_t code_point = 0;
  uint32_t minimum = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2, code_point = lead & 0x1F, minimum = 0x80;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3, code_point = lead & 0x0F, minimum = 0x800;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4, code_point = lead & 0x07, minimum = 0x10000;
  } else {
    return {0, 0};
  }
  if (i + length > text.size()) return {0, 0};
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return {0, 0};
    code_point = (code_point << 6) | (byte(i + k) & 0x3F);
  }
  if (code_point < minimum || code_point > 0x10FFFF || (code_point >= 0xD800 && code_point <= 0xDFFF)) {
    return {0, 0};
  }
  return {code_point, length};
}

// Approximates Go's unicode.IsPrint for non-ASCII code points without Unicode
// tables: control, separator/space, format and private-use ranges and
// noncharacters are not printable; unassigned code points count as printable.
bool is_go_printable(uint32_t cp) {
  if (cp >= 0x80 && cp <= 0x9F) return false;                 // C1 controls
  if (cp == 0xA0 || cp == 0xAD || cp == 0x1680) return false;  // NBSP, soft hyphen, ogham space
  if (cp >= 0x2000 && cp <= 0x200F) return false;              // spaces, ZW*, LRM/RLM
  if (cp >= 0x2028 && cp <= 0x202F) return false;              // separators, bidi embedding, NNBSP
  if (cp >= 0x205F && cp <= 0x206F) return false;              // MMSP, invisible operators, bidi
  if (cp == 0x3000 || cp == 0xFEFF) return false;
  if (cp >= 0xFFF9 && cp <= 0xFFFB) return false;              // interlinear annotation
  if (cp >= 0xE000 && cp <= 0xF8FF) return false;              // private use
  if (cp >= 0xF0000) return false;                             // planes 15-16: private use
  if ((cp & 0xFFFE) == 0xFFFE) return false;                   // noncharacters U+xxFFFE/F
  if (cp >= 0xFDD0 && cp <= 0xFDEF) return false;
  if (cp >= 0xE0000 && cp <= 0xE007F) return false;            // tags
  return true;
}

// Go's strconv.Quote.
std::string go_quote(std::string_view text) {
  std::string out = "\"";
  size_t i = 0;
  while (i < text.size()) {
    const auto [cp, length] = decode_utf8(text, i);
    if (length == 0) {
      const uint8_t bad = static_cast<uint8_t>(text[i]);
      out += "\\x";
      out += kLowerHex[bad >> 4];
      out += kLowerHex[bad & 0xF];
      ++i;
      continue;
    }
    if (cp == '"' || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp >= 0x20 && cp < 0x7F) {
      out += static_cast<char>(cp);
    } else if (cp >= 0x80 && is_go_printable(cp)) {
      out.append(text.substr(i, length));
    } else {
      switch (cp) {
        case '\a': out += "\\a"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\v': out += "\\v"; break;
        default:
          if (cp < 0x20 || cp == 0x7F) {
            out += "\\x";
            out += kLowerHex[cp >> 4];
            out += kLowerHex[cp & 0xF];
          } else {
            const int digits = cp < 0x10000 ? 4 : 8;
            out += digits == 4 ? "\\u" : "\\U";
            for (int shift = (digits - 1) * 4; shift >= 0; shift -= 4) out += kLowerHex[(cp >> shift) & 0xF];
          }
      }
    }
    i += length;
  }
  out += '"';
  return out;
}

// Go semantics for a string field: null keeps the zero value, a string is taken,
// anything else is a type error.
bool take_string_field(const Json& value, std::string& field) {
  if (value.is_null()) return true;
  if (!value.is_string()) return false;
  field = value.get<std::string>();
  return true;
}

// Go semantics for an int field: only integral JSON numbers that fit int64.
bool take_int_field(const Json& value, int64_t& field) {
  if (value.is_null()) return true;
  if (value.is_number_integer() && !value.is_number_unsigned()) {
    field = value.get<int64_t>();
    return true;
  }
  if (value.is_number_unsigned()) {
    const uint64_t unsigned_value = value.get<uint64_t>();
    if (unsigned_value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    field = static_cast<int64_t>(unsigned_value);
    return true;
  }
  return false;
}

}  // namespace

std::string pty_connected_json(std::string_view session_id, std::string_view mode) {
  Json frame;
  frame["type"] = "connected";
  if (!session_id.empty()) frame["session_id"] = session_id;
  if (!mode.empty()) frame["mode"] = mode;
  return go_encoder_json(frame);
}

std::string pty_viewer_connected_json(std::string_view session_id, std::string_view mode) {
  Json frame;
  frame["type"] = "connected";
  if (!session_id.empty()) frame["session_id"] = session_id;
  if (!mode.empty()) frame["mode"] = mode;
  frame["role"] = "viewer";
  return go_encoder_json(frame);
}

std::string pty_exit_json(int exit_code) {
  Json frame;
  frame["type"] = "exit";
  frame["exit_code"] = exit_code;
  return go_encoder_json(frame);
}

std::string pty_pong_json() {
  Json frame;
  frame["type"] = "pong";
  return go_encoder_json(frame);
}

std::string pty_error_json(std::string_view code, std::string_view message) {
  Json frame;
  frame["type"] = "error";
  if (!message.empty()) frame["error"] = message;
  if (!code.empty()) frame["code"] = code;
  return go_encoder_json(frame);
}

std::string pty_gap_json(int64_t requested, uint64_t available_from) {
  Json frame;
  frame["type"] = "gap";
  frame["requested"] = requested;
  frame["available_from"] = available_from;
  return go_encoder_json(frame);
}

std::string pty_unknown_frame_type_message(std::string_view type) {
  return "unknown frame type " + go_quote(type);
}

std::array<uint8_t, 9> pty_replay_header(uint64_t offset) {
  std::array<uint8_t, 9> header{};
  header[0] = kPtyChannelReplay;
  for (int i = 0; i < 8; ++i) header[1 + i] = static_cast<uint8_t>(offset >> (56 - 8 * i));
  return header;
}

PtyClientText parse_pty_client_text(std::string_view text) {
  const Json parsed = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return PtyInvalidJson{};
  // Go: unmarshalling `null` into a struct is a no-op, so it is a frame of type "".
  if (parsed.is_null()) return PtyUnknownType{};
  if (!parsed.is_object()) return PtyInvalidJson{};

  std::string type;
  std::string data;
  std::string signal;
  int64_t cols = 0;
  int64_t rows = 0;
  bool well_typed = true;
  // Document order, so the last of several case-variants of a key wins as in Go.
  for (const auto& [key, value] : parsed.items()) {
    if (equals_ignoring_ascii_case(key, "type")) {
      well_typed &= take_string_field(value, type);
    } else if (equals_ignoring_ascii_case(key, "data")) {
      well_typed &= take_string_field(value, data);
    } else if (equals_ignoring_ascii_case(key, "signal")) {
      well_typed &= take_string_field(value, signal);
    } else if (equals_ignoring_ascii_case(key, "cols")) {
      well_typed &= take_int_field(value, cols);
    } else if (equals_ignoring_ascii_case(key, "rows")) {
      well_typed &= take_int_field(value, rows);
    }
  }
  if (!well_typed) return PtyInvalidJson{};

  if (type == "stdin") return PtyStdinText{std::move(data)};
  if (type == "resize") return PtyResize{cols, rows};
  if (type == "signal") return PtySignal{std::move(signal)};
  if (type == "ping") return PtyPing{};
  return PtyUnknownType{std::move(type)};
}

std::optional<std::string_view> pty_stdin_from_binary(std::string_view message) {
  if (message.empty() || static_cast<uint8_t>(message[0]) != kPtyChannelStdin) return std::nullopt;
  return message.substr(1);
}

std::optional<int> pty_signal_number(std::string_view name) {
  if (name == "SIGINT") return SIGINT;
  if (name == "SIGTERM") return SIGTERM;
  if (name == "SIGKILL") return SIGKILL;
  if (name == "SIGQUIT") return SIGQUIT;
  if (name == "SIGHUP") return SIGHUP;
  return std::nullopt;
}

}  // namespace execd::protocol
