// Fuzz target: the streaming multipart/form-data parser. The same body fed in
// one piece and fed in socket-sized pieces must give the same parts, the same
// bytes and the same verdict: no split point may change what a file receives.
#include <cstdlib>
#include <string>
#include <vector>

#include "protocol/multipart.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using execd::protocol::MultipartCallbacks;
using execd::protocol::MultipartParser;

struct Outcome {
  std::vector<std::string> parts;  // headers summary + data of each part
  bool ok = false;
  bool operator==(const Outcome& o) const { return parts == o.parts && ok == o.ok; }
};

Outcome run(const std::string& boundary, const std::vector<std::string_view>& pieces) {
  Outcome out;
  MultipartCallbacks cb;
  cb.on_part_begin = [&](const execd::protocol::PartHeaders& h) {
    out.parts.push_back(h.name + "\n" + h.filename.value_or("-") + "\n");
  };
  cb.on_part_data = [&](std::string_view chunk) {
    if (chunk.empty() || out.parts.empty()) std::abort();
    out.parts.back().append(chunk);
  };
  cb.on_part_end = [&] { out.parts.back().append("\x01end"); };
  MultipartParser parser(boundary, cb);
  bool ok = true;
  for (auto p : pieces) ok = parser.feed(p) && ok;
  out.ok = ok && parser.finish();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto [boundary_part, body] = fuzz::two_parts(data, size);
  auto parsed = execd::protocol::boundary_from_content_type(
      "multipart/form-data; boundary=" + std::string(boundary_part.substr(0, 250)));
  if (!parsed.boundary) return 0;
  const std::string& boundary = *parsed.boundary;
  fuzz::Splitter splitter(reinterpret_cast<const uint8_t*>(body.data()), body.size());
  std::vector<std::string_view> pieces = splitter.pieces();
  std::vector<std::string_view> whole_after_seed{splitter.all()};
  if (!(run(boundary, whole_after_seed) == run(boundary, pieces))) std::abort();
  return 0;
}
