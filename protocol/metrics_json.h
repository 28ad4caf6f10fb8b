// protocol/metrics_json.h — the body of GET /metrics and each line of
// GET /metrics/watch, encoded as the Go execd v1.0.19 encodes its Metrics
// model (components/execd/pkg/web/model/metric.go):
//   {"cpu_count":2,"cpu_used_pct":12.5,"mem_total_mib":2048,"mem_used_mib":311.43359375,"timestamp":1764712345678}
// Four float64 fields and an int64 millisecond timestamp, in that order.
// Floats are written as Go's encoding/json writes a float64: the shortest
// text that round-trips, fixed notation ("2", not "2.0"; "0.1"), exponent
// form only below 1e-6 or from 1e21 ("1e-7", "1e+21"). Non-finite values
// (Go would fail to encode them) are written as 0.
//
// /metrics answers 200 application/json with metrics_json(). /metrics/watch
// (Go: headers Content-Type text/event-stream, Cache-Control no-cache,
// Connection keep-alive, X-Accel-Buffering no) writes metrics_json() + "\n"
// per sample (Go: one every ~2 s: a 1 s wait plus the 1 s CPU measurement),
// and on a read failure the line metrics_error_json(message) + "\n", i.e.
// {"error":"..."}. No SSE "data:" prefix, no blank line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace execd::protocol {

// A plain copy of the wire model (protocol/ does not depend on pty/).
struct MetricsJson {
  double cpu_count = 0;
  double cpu_used_pct = 0;
  double mem_total_mib = 0;
  double mem_used_mib = 0;
  int64_t timestamp_ms = 0;
};

// The JSON object, without a trailing newline.
std::string metrics_json(const MetricsJson& m);

// {"error":"<message>"} for a /metrics/watch line, without a newline.
std::string metrics_error_json(std::string_view message);

// Appends a float64 as Go's encoding/json does (see above).
void append_go_float(std::string& out, double value);

}  // namespace execd::protocol
