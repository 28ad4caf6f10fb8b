// Fuzz target: PTY WebSocket client frames (JSON text and binary stdin) and the
// server frame encoders: every encoder output is one line of valid JSON that
// carries the string it was given (after Go's U+FFFD replacement).
#include <cstdlib>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "protocol/json_text.h"
#include "protocol/pty_frames.h"

using namespace execd::protocol;

namespace {

nlohmann::json parse_line(const std::string& s) {
  if (s.empty() || s.back() != '\n' || s.find('\n') != s.size() - 1) std::abort();
  auto j = nlohmann::json::parse(s, nullptr, false);
  if (j.is_discarded() || !j.is_object()) std::abort();
  return j;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  PtyClientText frame = parse_pty_client_text(in);
  if (auto* sig = std::get_if<PtySignal>(&frame)) (void)pty_signal_number(sig->name);
  if (auto* unknown = std::get_if<PtyUnknownType>(&frame)) {
    auto j = parse_line(pty_error_json("INVALID_FRAME", pty_unknown_frame_type_message(unknown->type)));
    if (!j.contains("code")) std::abort();
  }
  auto stdin_bytes = pty_stdin_from_binary(in);
  if (stdin_bytes && (in.empty() || in[0] != 0 || stdin_bytes->size() != in.size() - 1)) std::abort();

  auto j = parse_line(pty_error_json("X", in));
  if (!in.empty() && utf8_valid(in) && j.value("error", "") != std::string(in)) std::abort();
  parse_line(pty_connected_json(in, "pty"));
  return 0;
}
