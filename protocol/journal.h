// protocol/journal: the execution journal's line format and its chain.
// Each entry is one JSON object on one line: {"seq":N,"prev":"<hex>",...}
// where `prev` is the lowercase hex SHA-256 of the previous entry's line
// exactly as written (without its newline), so editing, inserting or deleting
// any line breaks the chain. Pure: encoding and verification over strings.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/sha.h"

namespace execd::protocol {

// The prev of the very first entry of a journal: 64 zeros.
extern const char* const kJournalGenesis;

// One line (no newline): seq and prev first, then `body`'s fields in order.
std::string journal_line(uint64_t seq, std::string_view prev, const nlohmann::ordered_json& body);

// The same, with `raw_key`: `raw_json` appended as the last field, exactly
// as given (compact JSON the caller has validated: a harness's event).
std::string journal_line(uint64_t seq, std::string_view prev, const nlohmann::ordered_json& body,
                         std::string_view raw_key, std::string_view raw_json);

// POST /journal/events: one JSON object, an array of objects, or (ndjson)
// one object per line. Each event comes back compact (minified), at most
// `max_event_bytes` each and `max_events` in all; anything else is an error
// saying which event and why.
struct JournalEventsError {
  std::string message;
};
std::variant<std::vector<std::string>, JournalEventsError> decode_journal_events(std::string_view body, bool ndjson,
                                                                                   size_t max_event_bytes,
                                                                                   size_t max_events);

// The seq of a line, if it parses as a journal entry.
std::optional<uint64_t> journal_line_seq(std::string_view line);

struct JournalHead {
  uint64_t seq = 0;  // 0: no entries yet
  std::string hash;  // sha256 of the last line
};

struct JournalVerdict {
  bool ok = true;
  uint64_t entries = 0;
  uint64_t first_seq = 0;
  uint64_t broken_at = 0;
  std::string reason;
};

// Re-walks `lines` (oldest first, across rotated files). The first line's
// prev is accepted as it is (its predecessor may have rotated away) unless
// `anchored` (the first line must be seq 1 with the genesis prev). When
// `head` is given (what the writer knows it wrote last), the walk must end
// exactly there: a truncated tail or an edited last line is caught too.
// A broken chain names the first entry whose own line or whose prev does not
// match: when entry k's prev is wrong but entry k+1 still vouches for line k,
// it was line k-1 that changed.
JournalVerdict verify_journal(const std::vector<std::string_view>& lines, bool anchored,
                              const std::optional<JournalHead>& head);

// Splits text into lines (without newlines). A last line without its
// newline is returned too and flagged through `torn_tail`.
std::vector<std::string_view> split_lines(std::string_view text, bool* torn_tail = nullptr);

}  // namespace execd::protocol
