// protocol/file_requests: decoding the JSON bodies of the file API (simdjson,
// like every request body): /files/permissions and /directories, /files/mv,
// /files/replace, and the metadata part of an upload. Read as the Go daemon's
// streaming decoder reads them: the first JSON value counts, whatever
// follows it is ignored. Plain structs out; what a path or a name means is
// for fs/ to find out. Every failure is a 400 with the message given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "protocol/requests.h"

namespace execd::protocol {

// The first JSON value of `body` (leading whitespace skipped; trailing bytes
// ignored, as Go's json.Decoder does). Empty or unfinished: nullopt with
// `error` set ("request body is empty", "invalid JSON: ...").
std::optional<std::string_view> first_json_value(std::string_view body, std::string& error);

// {"owner","group","mode"}: names as strings (null or "" = leave alone),
// mode as an integer of octal digits (755, 4755, 0; null = leave alone).
struct FilePermissions {
  std::optional<std::string> owner, group;
  std::optional<uint32_t> mode;  // the mode bits (0755 for 755)
};

// {"<path>": {permissions}, ...}, in key order (a key given twice: the last).
using PermissionList = std::vector<std::pair<std::string, FilePermissions>>;
std::variant<PermissionList, DecodeError> decode_permission_map(std::string_view body);

// [{"src","dest"}, ...]
struct MoveItem {
  std::string src, dest;
};
std::variant<std::vector<MoveItem>, DecodeError> decode_move_list(std::string_view body);

// {"<path>": {"old","new"}, ...}, in key order; null strings read as "".
struct ReplaceItem {
  std::string path, old_text, new_text;
};
std::variant<std::vector<ReplaceItem>, DecodeError> decode_replace_map(std::string_view body);

// An upload's metadata part: {"path", "owner", "group", "mode"}.
struct UploadMetadata {
  std::string path;
  FilePermissions permissions;
};
std::variant<UploadMetadata, DecodeError> decode_upload_metadata(std::string_view text);

// 755 -> 0755; rejects negatives, digits 8 and 9 and values above 7777.
std::optional<uint32_t> mode_from_octal_digits(int64_t digits, std::string& error);

}  // namespace execd::protocol
