// protocol/metrics_json: see header.
#include "protocol/metrics_json.h"

#include <charconv>
#include <cmath>

#include "protocol/json_text.h"

namespace execd::protocol {

void append_go_float(std::string& out, double value) {
  if (!std::isfinite(value)) value = 0;
  double magnitude = std::fabs(value);
  bool exponent = magnitude != 0 && (magnitude < 1e-6 || magnitude >= 1e21);
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof buf, value,
                              exponent ? std::chars_format::scientific : std::chars_format::fixed);
  size_t n = static_cast<size_t>(result.ptr - buf);
  if (exponent && n >= 4 && buf[n - 4] == 'e' && buf[n - 3] == '-' && buf[n - 2] == '0') {
    // Go: "clean up e-09 to e-9".
    buf[n - 2] = buf[n - 1];
    --n;
  }
  out.append(buf, n);
}

std::string metrics_json(const MetricsJson& m) {
  std::string out;
  out.reserve(128);
  out += "{\"cpu_count\":";
  append_go_float(out, m.cpu_count);
  out += ",\"cpu_used_pct\":";
  append_go_float(out, m.cpu_used_pct);
  out += ",\"mem_total_mib\":";
  append_go_float(out, m.mem_total_mib);
  out += ",\"mem_used_mib\":";
  append_go_float(out, m.mem_used_mib);
  out += ",\"timestamp\":";
  out += std::to_string(m.timestamp_ms);
  out += '}';
  return out;
}

std::string metrics_error_json(std::string_view message) {
  std::string out = "{\"error\":";
  append_json_string_lossy(out, message);
  out += '}';
  return out;
}

}  // namespace execd::protocol
