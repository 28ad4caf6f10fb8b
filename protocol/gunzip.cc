// protocol/gunzip: see header.
#include "protocol/gunzip.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>

namespace execd::protocol {

ContentCoding content_coding(const std::string* header) {
  if (!header) return ContentCoding::identity;
  std::string_view v(*header);
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  auto is = [&v](std::string_view name) {
    return v.size() == name.size() && std::equal(v.begin(), v.end(), name.begin(), [](char a, char b) {
             return std::tolower(static_cast<unsigned char>(a)) == b;
           });
  };
  if (v.empty() || is("identity")) return ContentCoding::identity;
  if (is("gzip") || is("x-gzip")) return ContentCoding::gzip;
  return ContentCoding::unsupported;
}

Gunzip::Gunzip(uint64_t max_output) : z_(std::make_unique<z_stream_s>()), max_output_(max_output) {
  *z_ = z_stream_s{};
  // 16 + MAX_WBITS: the gzip wrapper only (no zlib wrapper, no raw deflate).
  if (inflateInit2(z_.get(), 16 + MAX_WBITS) == Z_OK)
    initialised_ = true;
  else
    fail("cannot start zlib's inflate (out of memory)");
}

Gunzip::~Gunzip() {
  if (initialised_) inflateEnd(z_.get());
}

void Gunzip::fail(std::string why) {
  if (error_.empty()) error_ = std::move(why);
}

Gunzip::Step Gunzip::inflate(std::string_view in, char* out, size_t room) {
  Step step;
  if (failed()) return step;
  // One byte past the bound is asked for, so reaching the bound exactly is
  // told apart from passing it.
  uint64_t allowance = max_output_ - std::min(max_output_, total_out_);
  size_t window = static_cast<size_t>(std::min<uint64_t>(room, allowance + 1));
  while (step.produced < window) {
    if (between_members_) {
      if (step.consumed == in.size()) break;
      inflateReset(z_.get());
      between_members_ = false;
    }
    z_->next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + step.consumed));
    z_->avail_in = static_cast<uInt>(std::min<size_t>(in.size() - step.consumed, UINT32_MAX));
    z_->next_out = reinterpret_cast<Bytef*>(out + step.produced);
    z_->avail_out = static_cast<uInt>(std::min<size_t>(window - step.produced, UINT32_MAX));
    uInt in_before = z_->avail_in, out_before = z_->avail_out;
    int rc = ::inflate(z_.get(), Z_NO_FLUSH);
    step.consumed += in_before - z_->avail_in;
    step.produced += out_before - z_->avail_out;
    if (rc == Z_STREAM_END) {
      ++members_;
      between_members_ = true;
      continue;
    }
    if (rc == Z_OK) {
      if (z_->avail_in == 0 && z_->avail_out > 0) break;  // all input taken, all output given
      continue;
    }
    if (rc == Z_BUF_ERROR) break;  // no progress possible: wants input (or room)
    fail(std::string("invalid gzip data: ") + (z_->msg ? z_->msg : "inflate error " + std::to_string(rc)));
    return Step{step.consumed, 0};
  }
  total_out_ += step.produced;
  if (total_out_ > max_output_) {
    too_large_ = true;
    fail("the gzip body decompresses to more than " + std::to_string(max_output_) + " bytes");
    return Step{step.consumed, 0};
  }
  return step;
}

}  // namespace execd::protocol
