// execd/journal/journal: the execution journal (JSON Lines in the state dir,
// protocol/journal for the format and the chain), its readers and its
// verification; the routes (GET /journal, GET /journal/verify, POST
// /journal/events) are execd/api/journal's.
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
// Readers (JournalReader, a Source per GET) catch up from the files and then
// follow live; a reader that falls behind goes back to the files, so a slow
// reader never holds entries in memory or slows writers. A catch-up reads at
// most 64 KiB of lines from where its position lies in the file (the journal
// keeps the offset of an entry every 64 KiB), never the whole file, on the
// threadpool through the file gate, like any file work.
#pragma once

#include <cstdint>
#include <deque>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "execd/work_gate.h"
#include "execd/context.h"
#include "protocol/journal.h"

namespace execd::http {
class Exchange;
}

namespace execd::journal {

class JournalReader;

class Journal {
 public:
  Journal(const Context& ctx, WorkGate& gate);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  bool enabled() const { return fd_ >= 0 || !unwritten_.empty(); }
  const Context& context() const { return ctx_; }
  WorkGate& gate() { return gate_; }
  size_t max_followers() const { return ctx_.config.max_journal_followers; }
  uv_loop_t* loop() const { return ctx_.loop; }
  // Adds seq and prev and appends the entry. `body` carries "type" and the
  // rest. A write the disk refuses (full) is kept, in order, and tried again
  // every second and at close; readers see an entry once it is in the file.
  void append(const nlohmann::ordered_json& body);
  // The same, with `raw_json` (compact, validated) as the field `raw_key`,
  // last: a harness's own event, kept byte for byte as it was minified.
  void append(const nlohmann::ordered_json& body, std::string_view raw_key, std::string_view raw_json);
  // The last entry in the file (what readers and verify go by).
  protocol::JournalHead head() const { return head_; }
  // The last entry accepted, written or still waiting for the disk.
  protocol::JournalHead chain() const { return chain_; }
  // Entries accepted and not yet in the file.
  size_t unsaved() const { return unwritten_.size(); }
  uint64_t current_size() const { return size_; }
  // Where a reader after entry `after` starts reading: each file (oldest
  // first) with the offset of an entry at or before after + 1.
  struct Start {
    std::string path;
    uint64_t offset;
  };
  std::vector<Start> starts(uint64_t after) const;
  // Oldest first.
  std::vector<std::string> files() const;
  void close();

  void follow(JournalReader* r) { followers_.insert(r); }
  void unfollow(JournalReader* r) { followers_.erase(r); }
  // Readers that asked to follow, catching up or live (the limit counts them).
  size_t followers() const { return following_; }
  void count_follower(int delta) { following_ = static_cast<size_t>(static_cast<int64_t>(following_) + delta); }

 private:
  void rotate();
  // Remembers where entry `seq` starts in the current file, every 64 KiB.
  void mark(uint64_t seq, uint64_t offset);
  struct Mark {
    uint64_t seq, offset;
  };
  std::vector<Mark> marks_, rotated_marks_;
  // Writes what waits, in order, until the disk refuses; true when done.
  bool write_unwritten();
  const Context& ctx_;
  WorkGate& gate_;
  std::string path_, rotated_path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  protocol::JournalHead head_;   // the file's last entry
  protocol::JournalHead chain_;  // the chain's, unwritten entries included
  struct Unwritten {
    std::string text;           // the whole line, newline included
    protocol::JournalHead head;  // its seq and hash: the head once it is written
  };
  std::deque<Unwritten> unwritten_;  // in order
  uv_timer_t retry_timer_;
  int last_error_ = 0;  // of the last refused write, logged once
  bool timer_open_ = false;
  std::set<JournalReader*> followers_;
  size_t following_ = 0;
};

// Answers `ex` with the entries after `since` as NDJSON (a JournalReader:
// catch-up from the files, then, with `follow`, live entries).
void serve_journal(http::Exchange& ex, Journal& journal, uint64_t since, bool follow);
// Answers `ex` with the verdict of re-walking the chain (on the threadpool).
void verify_journal(http::Exchange& ex, Journal& journal);

// A file's state after a change made through the API, for the journal:
// {"path", "exists", "size", "sha256", "mode"} (hashing on the threadpool).
// `op` is upload|mv|rm|chmod|replace|mkdir; `paths` the files it touched.
// `mount`: the paths are an isolated session's (described from inside it).
void journal_file_change(Journal& journal, std::string op, std::vector<std::string> paths,
                         nlohmann::ordered_json extra = nlohmann::ordered_json::object(),
                         std::shared_ptr<const pty::MountNamespace> mount = nullptr);

}  // namespace execd::journal
