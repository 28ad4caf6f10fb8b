// execd/api/journal: the execution journal (JSON Lines in the state dir,
// protocol/journal for the format and the chain) and its routes:
//   GET /journal?since=<seq>[&follow=true]   entries with seq > since, NDJSON
//   GET /journal/verify                      re-walks the chain
//   POST /journal/events                     a harness's own events, appended
//                                            to the chain (type "harness")
//
// Writing: one entry per finished command, session run, PTY session and file
// change made through the API, appended with one write(2) on the loop (a
// line to the page cache; no fsync per entry: a crash may lose the last
// entries, never reorder or corrupt earlier ones, and a torn last line is cut
// off and logged at start-up). The file is fsynced when it rotates and when
// execd stops. Past --journal-max-bytes the file is renamed to
// journal.1.jsonl (replacing the previous one) and a new file continues the
// chain: its first entry's prev is the hash of the old file's last line.
//
// Readers (JournalReader, a Source per GET) catch up from the files on the
// threadpool and then follow live; a reader that falls behind goes back to
// the files, so a slow reader never holds entries in memory or slows writers.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "execd/context.h"
#include "execd/routes.h"
#include "protocol/journal.h"

namespace execd::api {

class JournalReader;

class Journal {
 public:
  explicit Journal(const Context& ctx);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  bool enabled() const { return fd_ >= 0; }
  const Context& context() const { return ctx_; }
  uv_loop_t* loop() const { return ctx_.loop; }
  // Adds seq and prev and appends the entry. `body` carries "type" and the rest.
  void append(const nlohmann::ordered_json& body);
  // The same, with `raw_json` (compact, validated) as the field `raw_key`,
  // last: a harness's own event, kept byte for byte as it was minified.
  void append(const nlohmann::ordered_json& body, std::string_view raw_key, std::string_view raw_json);
  protocol::JournalHead head() const { return head_; }
  uint64_t current_size() const { return size_; }
  // Oldest first.
  std::vector<std::string> files() const;
  void close();

  void follow(JournalReader* r) { followers_.insert(r); }
  void unfollow(JournalReader* r) { followers_.erase(r); }

 private:
  void rotate();
  const Context& ctx_;
  std::string path_, rotated_path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  protocol::JournalHead head_;
  std::set<JournalReader*> followers_;
};

void add_journal_routes(RouteTable& routes, Journal& journal);

// A file's state after a change made through the API, for the journal:
// {"path", "exists", "size", "sha256", "mode"} (hashing on the threadpool).
// `op` is upload|mv|rm|chmod|replace|mkdir; `paths` the files it touched.
void journal_file_change(Journal& journal, std::string op, std::vector<std::string> paths,
                         nlohmann::ordered_json extra = nlohmann::ordered_json::object());

}  // namespace execd::api
