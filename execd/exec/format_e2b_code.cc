// execd/exec/format_e2b_code: E2B's code-interpreter lines as a stream
// format (see formats.h).
#include "execd/exec/formats.h"

#include <string>

#include "protocol/e2b_code.h"
#include "protocol/json_text.h"

namespace execd::exec {

namespace e2b = protocol::e2b_code;

namespace {

// A code run's stream as E2B's server writes it: NDJSON lines, kernel
// output as text (a character split by a read of the retained log is held
// back until it is whole), results and errors translated from the run's
// stored events, end_of_execution last.
class E2BCodeFormat final : public StreamFormat {
 public:
  const char* content_type() const override { return "application/x-ndjson"; }
  uint64_t ping_interval_ms() const override { return 10000; }
  void begin(std::string&, std::string_view, int64_t) override {}
  void ping(std::string& out, int64_t) override { e2b::append_keepalive_line(out); }
  void gap(std::string&, protocol::OutputStream, uint64_t, uint64_t, int64_t) override {}
  void output(std::string& out, protocol::OutputStream s, const uint8_t* data, size_t len, int64_t ts) override {
    std::string& carry = carry_[static_cast<int>(s)];
    carry.append(reinterpret_cast<const char*>(data), len);
    size_t tail = protocol::utf8_incomplete_tail(reinterpret_cast<const uint8_t*>(carry.data()), carry.size());
    if (tail == carry.size()) return;
    e2b::append_stream_line(out, s == protocol::OutputStream::err, std::string_view(carry).substr(0, carry.size() - tail),
                            ts * 1000000);
    carry.erase(0, carry.size() - tail);
  }
  void flush(std::string& out, protocol::OutputStream s, int64_t ts) override {
    std::string& carry = carry_[static_cast<int>(s)];
    if (carry.empty()) return;
    e2b::append_stream_line(out, s == protocol::OutputStream::err, carry, ts * 1000000);
    carry.clear();
  }
  void terminal(std::string& out, const protocol::ExecutionResult& r, int64_t) override {
    if (!r.start_error.empty()) e2b::append_error_line(out, "ExecutionError", r.start_error, "");
    e2b::append_end_line(out);
  }
  void background_ack(std::string& out, int64_t) override { e2b::append_end_line(out); }
  void overflow(std::string& out, std::string_view message, const protocol::ExecutionResult&, int64_t) override {
    e2b::append_error_line(out, "OutputOverflow", message, "");
    e2b::append_end_line(out);
  }
  void event(std::string& out, std::string_view json_object) override {
    e2b::translate_event(out, json_object, main_pending_);
  }

 private:
  std::string carry_[2];
  bool main_pending_ = false;
};

}  // namespace

std::unique_ptr<StreamFormat> e2b_code_format() { return std::make_unique<E2BCodeFormat>(); }

}  // namespace execd::exec
