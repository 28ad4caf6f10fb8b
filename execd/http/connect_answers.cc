// execd/http/connect_answers: see header.
#include "execd/http/connect_answers.h"

namespace execd::http::rpc {

namespace {
constexpr const char* kJson = "application/json";
constexpr const char* kStreamJson = "application/connect+json";
}  // namespace

void respond(http::Exchange& ex, std::string_view json) { ex.respond(200, kJson, json); }

void respond_error(http::Exchange& ex, const cn::Error& e) {
  ex.respond(cn::http_status(e.code), kJson, cn::error_json(e));
}

void begin_stream(http::Exchange& ex) {
  ex.begin_chunked(200, {std::string("Content-Type: ") + kStreamJson, "Cache-Control: no-cache",
                         "X-Accel-Buffering: no"});
}

void stream_error(http::Exchange& ex, const cn::Error& e) {
  if (!ex.responding()) begin_stream(ex);
  std::string out = ex.take_buffer();
  cn::append_end_stream(out, &e);
  ex.end(std::move(out));
}

}  // namespace execd::http::rpc
