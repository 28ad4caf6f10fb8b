// protocol/packed_record: a record compressed for keeping in memory (raw
// deflate, RFC 1951, with a preset dictionary): exec/cold_records keeps
// finished executions this way. A record of protocol/execution_record is
// ~1 KiB of JSON whose field names, constants (the kernel's boot id, the
// SHA-256 of nothing, false, null) and structure repeat from record to
// record; a dictionary that is such a record leaves mostly the values that
// differ (ids, digests, times), ~5x smaller.
//
// Nothing here is ever written to disk: the dictionary may change with
// every build and every boot.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace execd::protocol {

class RecordPacker {
 public:
  // `dictionary`: text like what will be packed (at most 2 KiB is used:
  // the window).
  explicit RecordPacker(std::string dictionary);
  std::string pack(std::string_view record) const;
  // nullopt: not what pack() made with this dictionary.
  std::optional<std::string> unpack(std::string_view packed) const;

 private:
  std::string dictionary_;
};

}  // namespace execd::protocol
