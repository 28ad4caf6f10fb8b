// execd/logging: see header.
#include "execd/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <string>

#include "protocol/json_text.h"

namespace execd {

namespace {

// %j: the log message as a JSON string, so --log-format json stays one valid
// object per line whatever a message contains.
class JsonMessageFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    std::string s;
    protocol::append_json_string_lossy(s, std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(s.data(), s.data() + s.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JsonMessageFlag>(); }
};

}  // namespace

void setup_logging(const Config& cfg) {
  auto logger = spdlog::stderr_logger_st("execd");
  spdlog::set_default_logger(logger);
  std::string level = cfg.log_level;
  if (!level.empty() && isdigit(static_cast<unsigned char>(level[0]))) {
    int n = std::stoi(level);  // the Go daemon's scale
    level = n <= 2 ? "critical" : n == 3 ? "error" : n == 4 ? "warn" : n <= 6 ? "info" : "debug";
  }
  spdlog::set_level(spdlog::level::from_str(level == "warning" ? "warn" : level));
  if (cfg.log_format == LogFormat::json) {
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<JsonMessageFlag>('j').set_pattern(R"({"time":"%Y-%m-%dT%H:%M:%S.%f%z","level":"%l","msg":%j})");
    spdlog::set_formatter(std::move(formatter));
  } else
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %l %v");
}

}  // namespace execd
