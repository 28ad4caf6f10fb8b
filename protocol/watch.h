// protocol/watch: the bytes of the file-change feed (GET /files/watch) and
// of the kernel's inotify queue. Pure: the records read from an inotify
// descriptor are decoded here (so the decoder is fuzzable), and the feed's
// NDJSON lines are encoded here; which directory a watch descriptor means,
// and when an event is due, is execd/watch's business.
//
// A feed line is one JSON object and '\n':
//   {"type":"watch","path":P,"recursive":true,"seq":N,"newest":M,"timestamp":T}
//                                                     first line: the feed continues
//                                                     after N; M is the watch's newest
//   {"seq":N,"type":"create|write|remove|rename|chmod","path":P,["from":Q,]
//    "entry":"file|dir|symlink|other","size":S,"mtime":M,"mode":"644",
//    ["moved":true,] "timestamp":T}
//   {"seq":N,"type":"gap","reason":"overflow",...}    events the kernel dropped
//   {"type":"gap","since":S,"continues_after":N,"reason":R,"timestamp":T}
//                                                     events this feed cannot replay
//   {"seq":N,"type":"gone","path":P,"reason":R,...}   the root went; the feed ends
//   {"type":"ping","seq":N,"timestamp":T}             keepalive, with the seq sent up to
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace execd::protocol {

// One record of an inotify read (struct inotify_event): `name` points into
// the buffer, without its NUL padding (empty for events on the watched
// directory itself).
struct InotifyRecord {
  int32_t wd = 0;
  uint32_t mask = 0;
  uint32_t cookie = 0;
  std::string_view name;
};

// Appends the complete records of `buf` to `out`; returns the bytes they
// took (a record cut off at the end is left for the next read; the kernel
// never does that, a fuzzer does). A record whose length is impossible ends
// the parse.
size_t parse_inotify_records(const uint8_t* buf, size_t len, std::vector<InotifyRecord>& out);

enum class WatchKind : uint8_t { create, write, remove, rename, chmod, gap, gone };
enum class EntryType : uint8_t { unknown, file, dir, symlink, other };
const char* watch_kind_name(WatchKind k);
const char* entry_type_name(EntryType t);

// An entry as lstat found it after the change (exists false: gone by then).
struct EntryStat {
  bool exists = false;
  EntryType type = EntryType::unknown;
  uint64_t size = 0;
  int64_t mtime_ms = 0;
  uint32_t mode = 0;  // permission bits (07777)
};

struct WatchEvent {
  uint64_t seq = 0;
  WatchKind kind = WatchKind::create;
  std::string path;
  std::string from;                      // rename: the old path
  EntryType entry = EntryType::unknown;  // what the kernel said (dir or not) when not stat'd
  EntryStat stat;
  bool moved = false;                    // create/remove: moved into/out of the watched tree
  bool root = false;                     // rename: of the watched root itself
  std::string reason;                    // gap, gone
  int64_t ts_ms = 0;
};

// One line each, '\n' included, appended to `out`.
void encode_watch_event(std::string& out, const WatchEvent& e);
void encode_watch_hello(std::string& out, std::string_view path, bool recursive, uint64_t seq, uint64_t newest,
                        int64_t ts_ms);
void encode_watch_gap(std::string& out, uint64_t since, uint64_t continues_after, std::string_view reason,
                      int64_t ts_ms);
void encode_watch_ping(std::string& out, uint64_t seq, int64_t ts_ms);

// GET /files/watch's query: path (required), recursive (default false),
// since (a seq; absent: live events only).
struct WatchQuery {
  std::string path;
  bool recursive = false;
  std::optional<uint64_t> since;
};
// nullopt with `error` set when a value is malformed.
std::optional<WatchQuery> decode_watch_query(const std::string* path, const std::string* recursive,
                                             const std::string* since, std::string& error);

}  // namespace execd::protocol
