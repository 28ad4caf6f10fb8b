// execd/exec/format_envelope: OpenSandbox's event envelope as a stream
// format (see formats.h).
#include "execd/exec/formats.h"

namespace execd::exec {

namespace {

// The OpenSandbox event envelope: protocol::EventEncoder as a StreamFormat.
class EnvelopeFormat final : public StreamFormat {
 public:
  EnvelopeFormat(protocol::Framing framing, bool split_lines) : encoder_(framing) { encoder_.set_split_lines(split_lines); }
  const char* content_type() const override { return encoder_.content_type(); }
  void begin(std::string& out, std::string_view id, int64_t ts) override {
    encoder_.init(out, id, ts);
    encoder_.ping(out, ts);
  }
  void ping(std::string& out, int64_t ts) override { encoder_.ping(out, ts); }
  void start_at(protocol::OutputStream s, uint64_t offset) override { encoder_.start_at(s, offset); }
  void gap(std::string& out, protocol::OutputStream s, uint64_t requested, uint64_t from, int64_t ts) override {
    encoder_.gap(out, s, requested, from, ts);
  }
  void output(std::string& out, protocol::OutputStream s, const uint8_t* data, size_t len, int64_t ts) override {
    encoder_.output(out, s, data, len, ts);
  }
  void flush(std::string& out, protocol::OutputStream s, int64_t ts) override { encoder_.flush(out, s, ts); }
  void terminal(std::string& out, const protocol::ExecutionResult& r, int64_t ts) override {
    encoder_.terminal(out, r, ts);
  }
  void background_ack(std::string& out, int64_t ts) override { encoder_.background_ack(out, ts); }
  void overflow(std::string& out, std::string_view message, const protocol::ExecutionResult& r,
                int64_t ts) override {
    encoder_.error(out, "OutputOverflow", message, ts);
    protocol::ExecutionResult end = r;
    end.status = "output_overflow";
    encoder_.terminal(out, end, ts);
  }
  void event(std::string& out, std::string_view json_object) override { encoder_.event(out, json_object); }

 private:
  protocol::EventEncoder encoder_;
};

}  // namespace

std::unique_ptr<StreamFormat> envelope_format(protocol::Framing framing, bool split_lines) {
  return std::make_unique<EnvelopeFormat>(framing, split_lines);
}

}  // namespace execd::exec
