// protocol/errors: see header.
#include "protocol/errors.h"

#include "protocol/json_text.h"

namespace execd::protocol {

std::string error_body(std::string_view code, std::string_view message) {
  std::string out = "{\"code\":";
  append_json_string_lossy(out, code);
  if (!message.empty()) {
    out += ",\"message\":";
    append_json_string_lossy(out, message);
  }
  out += '}';
  return out;
}

std::string_view code_for_status(int status) {
  switch (status) {
    case 401: return codes::kUnauthorized;
    case 404: return codes::kNotFound;
    case 405: return codes::kMethodNotAllowed;
    case 413: return codes::kPayloadTooLarge;
    case 431: return codes::kHeadersTooLarge;
    case 408: return codes::kRequestTimeout;
    case 400: return codes::kBadRequest;
    default: return codes::kRuntimeError;
  }
}

}  // namespace execd::protocol
