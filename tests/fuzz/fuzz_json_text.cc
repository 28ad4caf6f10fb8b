// Fuzz target: the hot-path JSON string writer and the UTF-8 scanners.
// Whatever valid UTF-8 goes in comes back from a JSON parser unchanged; the
// lossy writer always produces valid JSON; the scanners agree with each other.
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "protocol/json_text.h"
#include "protocol/websocket.h"

using namespace execd::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t valid = utf8_valid_prefix(data, size);
  if (valid > size) std::abort();
  if ((valid == size) != utf8_valid(in)) std::abort();
  if (utf8_valid(in) != is_valid_utf8(in)) std::abort();
  size_t tail = utf8_incomplete_tail(data, size);
  if (tail > 3 || tail > size) std::abort();

  std::string prefix(in.substr(0, valid));
  std::string out;
  append_json_string(out, prefix);
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded() || j.get<std::string>() != prefix) std::abort();

  std::string lossy;
  append_json_string_lossy(lossy, in);
  auto k = nlohmann::json::parse(lossy, nullptr, false);
  if (k.is_discarded() || !k.is_string()) std::abort();
  if (in.size() == valid && k.get<std::string>() != prefix) std::abort();
  return 0;
}
