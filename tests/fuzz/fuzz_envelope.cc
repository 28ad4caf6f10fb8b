// Fuzz target: the event envelope encoder, both framings. Exact framing is a
// round trip: decode every line it writes (JSON, then `text` or `b64`) and the
// concatenated bytes per stream must equal what went in, with offsets that
// leave no hole. Compat framing: every event is one line of valid JSON and no
// line splitter can cut it (no raw CR, LF, U+0085, U+2028, U+2029 inside).
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "protocol/base64.h"
#include "protocol/envelope.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using namespace execd::protocol;

void check_one_line_json(std::string_view line) {
  if (line.find('\r') != std::string_view::npos) std::abort();
  if (line.find("\xc2\x85") != std::string_view::npos || line.find("\xe2\x80\xa8") != std::string_view::npos ||
      line.find("\xe2\x80\xa9") != std::string_view::npos)
    std::abort();
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Splitter splitter(data, size);
  auto pieces = splitter.pieces();
  for (Framing framing : {Framing::exact, Framing::compat}) {
    EventEncoder enc(framing);
    std::string out;
    std::string sent[2];
    enc.init(out, "id", 1);
    for (size_t i = 0; i < pieces.size(); ++i) {
      auto s = static_cast<OutputStream>(i % 3 == 2);
      enc.output(out, s, reinterpret_cast<const uint8_t*>(pieces[i].data()), pieces[i].size(), 2);
      sent[static_cast<int>(s)].append(pieces[i]);
    }
    enc.flush(out, OutputStream::out, 3);
    enc.flush(out, OutputStream::err, 3);
    ExecutionResult result;
    result.exit_code = 0;
    result.stdout_bytes = sent[0].size();
    result.stderr_bytes = sent[1].size();
    enc.terminal(out, result, 4);

    std::string got[2];
    size_t at = 0;
    while (at < out.size()) {
      size_t nl = out.find('\n', at);
      if (nl == std::string::npos) std::abort();  // every event ends its line
      std::string_view line(out.data() + at, nl - at);
      at = nl + 1;
      if (line.empty()) {
        if (framing == Framing::exact) std::abort();
        continue;
      }
      check_one_line_json(line);
      if (framing != Framing::exact) continue;
      auto j = nlohmann::json::parse(line);
      std::string type = j.value("type", "");
      if (type != "stdout" && type != "stderr") continue;
      std::string& dest = got[type == "stderr"];
      if (j.at("offset").get<uint64_t>() != dest.size()) std::abort();
      if (j.contains("text")) {
        dest += j["text"].get<std::string>();
      } else {
        auto bytes = base64_decode(j.at("b64").get<std::string>());
        if (!bytes || bytes->empty()) std::abort();
        dest += *bytes;
      }
    }
    if (framing == Framing::exact && (got[0] != sent[0] || got[1] != sent[1])) std::abort();
  }
  return 0;
}
