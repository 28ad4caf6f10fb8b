// Fuzz target: the HTTP/1.1 request parser (protocol/http on llhttp), fed in
// arbitrary pieces the way a socket delivers them, with pipelining, pauses,
// upgrades and EOF. Checks the limits hold: no request head larger than the
// head limit and no buffered body larger than the body limit gets through.
#include <cstdlib>

#include "protocol/http.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using execd::protocol::BodyMode;
using execd::protocol::HttpRequest;
using execd::protocol::RequestParser;

constexpr size_t kHeadLimit = 2048;
constexpr size_t kBodyLimit = 4096;

struct Visitor : execd::protocol::RequestVisitor {
  bool stream = false;
  size_t streamed = 0;
  BodyMode on_request_head(HttpRequest& req) override {
    size_t head = req.method.size() + req.target.size();
    for (auto& [name, value] : req.headers) head += name.size() + value.size();
    if (head > kHeadLimit + req.method.size()) std::abort();
    stream = req.method == "PUT";
    return stream ? BodyMode::stream : BodyMode::buffer;
  }
  void on_body(const char*, size_t len) override { streamed += len; }
  void on_request(HttpRequest& req) override {
    if (!stream && req.body.size() > kBodyLimit) std::abort();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Splitter splitter(data, size);
  Visitor visitor;
  RequestParser::Limits limits;
  limits.max_head_bytes = kHeadLimit;
  limits.max_body_bytes = kBodyLimit;  // named: Limits grew a field in between once, and {a, b} kept compiling
  RequestParser parser(visitor, limits);
  for (std::string_view piece : splitter.pieces()) {
    while (!piece.empty()) {
      size_t consumed = 0;
      auto result = parser.feed(piece.data(), piece.size(), consumed);
      if (consumed > piece.size()) std::abort();
      piece.remove_prefix(consumed);
      if (result == RequestParser::Result::paused) {
        parser.resume();
        continue;
      }
      if (result == RequestParser::Result::error || result == RequestParser::Result::upgrade) return 0;
      if (result == RequestParser::Result::need_more) {
        if (!piece.empty()) std::abort();  // need_more means every byte was used
        break;
      }
    }
  }
  parser.finish();
  return 0;
}
