// Fuzz target: the file-change feed and track_changes inputs (protocol/watch,
// protocol/changes, protocol/journal). The first byte picks the parser:
//  0: inotify records: never more consumed than given, names never hold a
//     NUL, the records re-encode to the bytes consumed;
//  1: a run's events folded by ChangeSet (bounded by its limit), its JSON
//     read back (decode_changes_json) gives the same JSON;
//  2: harness events: each comes back as one compact JSON object within the
//     size limit, and its journal line parses as entry `seq`;
//  3: the watch query values.
#include <simdjson.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "protocol/changes.h"
#include "protocol/journal.h"
#include "protocol/watch.h"

using namespace execd::protocol;

namespace {

void inotify(const uint8_t* data, size_t size) {
  std::vector<InotifyRecord> out;
  size_t used = parse_inotify_records(data, size, out);
  if (used > size) std::abort();
  size_t at = 0;
  for (const auto& r : out) {
    if (r.name.find('\0') != std::string_view::npos) std::abort();
    uint32_t len = 0;
    std::memcpy(&len, data + at + 12, 4);
    if (r.name.size() > len) std::abort();
    at += 16 + len;
  }
  if (at != used) std::abort();
}

void changes(const uint8_t* data, size_t size) {
  if (size < 1) return;
  size_t max = data[0] % 16 + 1;
  ChangeSet set(max);
  static const char* names[] = {"/w/a", "/w/b", "/w/a/x", "/w/b/x", "/w/c", "/w/a/y/z", "/w/\xff", "/w"};
  for (size_t i = 1; i + 2 < size; i += 3) {
    WatchEvent e;
    e.kind = static_cast<WatchKind>(data[i] % 7);
    e.path = names[data[i + 1] % 8];
    e.from = names[data[i + 2] % 8];
    e.entry = static_cast<EntryType>(data[i + 2] % 5);
    set.add(e, data[i] & 0x80);
    if (set.size() > max) std::abort();
  }
  ChangeSummary s;
  s.roots = {"/w"};
  s.entries = set.take();
  for (size_t i = 1; i < s.entries.size(); ++i)
    if (!(s.entries[i - 1].path < s.entries[i].path)) std::abort();
  s.dropped = set.dropped();
  s.overflow = set.overflow();
  s.error = set.error();
  std::string text = changes_json(s).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  auto back = decode_changes_json(text);
  if (!back) std::abort();
  if (changes_json(*back).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) != text) std::abort();
}

void events(const uint8_t* data, size_t size) {
  if (size < 1) return;
  bool ndjson = data[0] & 1;
  size_t max_bytes = (data[0] >> 1) * 8 + 2;
  std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  auto r = decode_journal_events(body, ndjson, max_bytes, 50);
  if (auto* list = std::get_if<std::vector<std::string>>(&r)) {
    if (list->empty() || list->size() > 50) std::abort();
    simdjson::dom::parser p;
    uint64_t seq = 1;
    for (const auto& ev : *list) {
      simdjson::dom::element el;
      if (ev.size() > max_bytes || p.parse(ev).get(el) || !el.is_object()) std::abort();
      if (simdjson::minify(el) != ev) std::abort();
      nlohmann::ordered_json body;
      body["type"] = "harness";
      std::string line = journal_line(seq, kJournalGenesis, body, "event", ev);
      if (journal_line_seq(line) != seq) std::abort();
      ++seq;
    }
  }
}

void query(const uint8_t* data, size_t size) {
  std::string s(reinterpret_cast<const char*>(data), size);
  size_t a = s.find('&'), b = a == std::string::npos ? a : s.find('&', a + 1);
  std::string path = s.substr(0, a);
  std::string rec = a == std::string::npos ? "" : s.substr(a + 1, b == std::string::npos ? b : b - a - 1);
  std::string since = b == std::string::npos ? "" : s.substr(b + 1);
  std::string err;
  auto q = decode_watch_query(&path, &rec, &since, err);
  if (q && (q->path.empty() || q->path.find('\0') != std::string::npos)) std::abort();
  if (!q && err.empty()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  switch (data[0] % 4) {
    case 0: inotify(data + 1, size - 1); break;
    case 1: changes(data + 1, size - 1); break;
    case 2: events(data + 1, size - 1); break;
    case 3: query(data + 1, size - 1); break;
  }
  return 0;
}
