// protocol/packed_record: see header.
#include "protocol/packed_record.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>

namespace execd::protocol {

namespace {

// A 2 KiB window holds a ~1 KiB dictionary and the record being packed;
// memLevel 2 keeps the deflate state at ~10 KiB (made per call: packing
// happens once per finished execution, off the request path).
constexpr int kWindowBits = 11, kMemLevel = 2;
constexpr size_t kMaxUnpacked = 64 << 20;  // a record is at most a few MiB (its command line)

}  // namespace

RecordPacker::RecordPacker(std::string dictionary) : dictionary_(std::move(dictionary)) {
  size_t window = size_t(1) << kWindowBits;
  if (dictionary_.size() > window) dictionary_.erase(0, dictionary_.size() - window);
}

std::string RecordPacker::pack(std::string_view record) const {
  z_stream z{};
  if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, -kWindowBits, kMemLevel, Z_DEFAULT_STRATEGY) != Z_OK)
    return std::string(1, '\0') + std::string(record);  // stored as it is
  deflateSetDictionary(&z, reinterpret_cast<const Bytef*>(dictionary_.data()), static_cast<uInt>(dictionary_.size()));
  std::string out(1 + deflateBound(&z, static_cast<uLong>(record.size())), '\0');
  out[0] = '\1';
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(record.data()));
  z.avail_in = static_cast<uInt>(record.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data() + 1);
  z.avail_out = static_cast<uInt>(out.size() - 1);
  int rc = deflate(&z, Z_FINISH);
  size_t produced = out.size() - 1 - z.avail_out;
  deflateEnd(&z);
  if (rc != Z_STREAM_END || produced >= record.size()) return std::string(1, '\0') + std::string(record);
  out.resize(1 + produced);
  return out;
}

std::optional<std::string> RecordPacker::unpack(std::string_view packed) const {
  if (packed.empty()) return std::nullopt;
  if (packed[0] == '\0') return std::string(packed.substr(1));
  if (packed[0] != '\1') return std::nullopt;
  z_stream z{};
  if (inflateInit2(&z, -kWindowBits) != Z_OK) return std::nullopt;
  // Raw inflate takes the dictionary before any input.
  inflateSetDictionary(&z, reinterpret_cast<const Bytef*>(dictionary_.data()), static_cast<uInt>(dictionary_.size()));
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(packed.data() + 1));
  z.avail_in = static_cast<uInt>(packed.size() - 1);
  std::string out;
  int rc = Z_OK;
  while (rc == Z_OK) {
    size_t at = out.size();
    out.resize(at + std::max<size_t>(4096, packed.size() * 4));
    z.next_out = reinterpret_cast<Bytef*>(out.data() + at);
    z.avail_out = static_cast<uInt>(out.size() - at);
    rc = inflate(&z, Z_NO_FLUSH);
    out.resize(out.size() - z.avail_out);
    if (out.size() > kMaxUnpacked) rc = Z_DATA_ERROR;
    if (rc == Z_BUF_ERROR && z.avail_in > 0) rc = Z_OK;  // needed more room
  }
  bool whole = rc == Z_STREAM_END && z.avail_in == 0;
  inflateEnd(&z);
  if (!whole) return std::nullopt;
  return out;
}

}  // namespace execd::protocol
