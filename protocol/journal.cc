// protocol/journal: see header.
#include "protocol/journal.h"

#include <simdjson.h>

#include <optional>

namespace execd::protocol {

const char* const kJournalGenesis = "0000000000000000000000000000000000000000000000000000000000000000";

std::string journal_line(uint64_t seq, std::string_view prev, const nlohmann::ordered_json& body) {
  constexpr auto kReplace = nlohmann::ordered_json::error_handler_t::replace;
  bool plain = body.is_object();
  for (auto it = body.begin(); plain && it != body.end(); ++it) plain = it.key() != "seq" && it.key() != "prev";
  if (!plain) {
    // A body that carries its own seq or prev (they are dropped), or none.
    nlohmann::ordered_json j;
    j["seq"] = seq;
    j["prev"] = std::string(prev);
    if (body.is_object())
      for (auto it = body.begin(); it != body.end(); ++it)
        if (it.key() != "seq" && it.key() != "prev") j[it.key()] = it.value();
    return j.dump(-1, ' ', false, kReplace);
  }
  // The same bytes as the object above, without copying the body into it:
  // the body's own dump with seq and prev put in front of its fields.
  std::string fields = body.dump(-1, ' ', false, kReplace);
  std::string line = "{\"seq\":" + std::to_string(seq) + ",\"prev\":";
  line += nlohmann::ordered_json(std::string(prev)).dump(-1, ' ', false, kReplace);
  line.reserve(line.size() + fields.size() + 1);
  if (fields.size() > 2) line += ',';
  line.append(fields, 1, std::string::npos);
  return line;
}

std::string journal_line(uint64_t seq, std::string_view prev, const nlohmann::ordered_json& body,
                         std::string_view raw_key, std::string_view raw_json) {
  std::string line = journal_line(seq, prev, body);
  // The dump ends with the object's '}': the raw field goes before it.
  line.pop_back();
  nlohmann::ordered_json key = std::string(raw_key);
  line += ',';
  line += key.dump();
  line += ':';
  line += raw_json;
  line += '}';
  return line;
}

std::variant<std::vector<std::string>, JournalEventsError> decode_journal_events(std::string_view body, bool ndjson,
                                                                                   size_t max_event_bytes,
                                                                                   size_t max_events) {
  std::vector<std::string> out;
  auto take = [&](simdjson::dom::element el, size_t index) -> std::optional<JournalEventsError> {
    if (!el.is_object()) return JournalEventsError{"event " + std::to_string(index) + " is not a JSON object"};
    if (out.size() >= max_events)
      return JournalEventsError{"more than " + std::to_string(max_events) + " events in one request"};
    std::string text = simdjson::minify(el);
    if (text.size() > max_event_bytes)
      return JournalEventsError{"event " + std::to_string(index) + " is " + std::to_string(text.size()) +
                                " bytes; at most " + std::to_string(max_event_bytes) + " (--journal-event-max-bytes)"};
    out.push_back(std::move(text));
    return std::nullopt;
  };
  thread_local simdjson::dom::parser parser;
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return JournalEventsError{"no events in the body"};
  if (ndjson) {
    // One object per line; blank lines are skipped.
    size_t at = 0, index = 0;
    while (at < body.size()) {
      size_t nl = body.find('\n', at);
      if (nl == std::string_view::npos) nl = body.size();
      std::string_view line = body.substr(at, nl - at);
      at = nl + 1;
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      simdjson::dom::element el;
      if (auto err = parser.parse(line.data(), line.size()).get(el))
        return JournalEventsError{"event " + std::to_string(index) + " is not valid JSON: " + simdjson::error_message(err)};
      if (auto e = take(el, index++)) return *e;
    }
    return out;
  }
  simdjson::dom::element root;
  if (auto err = parser.parse(body.data(), body.size()).get(root))
    return JournalEventsError{std::string("invalid JSON: ") + simdjson::error_message(err)};
  simdjson::dom::array list;
  if (!root.get(list)) {
    size_t index = 0;
    for (auto el : list)
      if (auto e = take(el, index++)) return *e;
    if (out.empty()) return JournalEventsError{"no events in the body"};
    return out;
  }
  if (auto e = take(root, 0)) return *e;
  return out;
}

namespace {
struct Parsed {
  bool ok = false;
  uint64_t seq = 0;
  std::string prev;
};
Parsed parse_entry(std::string_view line) {
  Parsed p;
  thread_local simdjson::dom::parser parser;
  simdjson::dom::object obj;
  if (parser.parse(line.data(), line.size()).get(obj)) return p;
  uint64_t seq = 0;
  std::string_view prev;
  simdjson::dom::element s;
  if (obj["seq"].get(s) || !(s.is_uint64() || (s.is_int64() && int64_t(s.get_int64().value()) >= 0)) ||
      s.get(seq) || obj["prev"].get(prev))
    return p;
  p.seq = seq;
  p.prev = std::string(prev);
  p.ok = true;
  return p;
}
}  // namespace

std::optional<uint64_t> journal_line_seq(std::string_view line) {
  Parsed p = parse_entry(line);
  if (!p.ok) return std::nullopt;
  return p.seq;
}

JournalVerdict verify_journal(const std::vector<std::string_view>& lines, bool anchored,
                              const std::optional<JournalHead>& head) {
  JournalVerdict v;
  auto fail = [&v](uint64_t at, std::string why) {
    v.ok = false;
    v.broken_at = at;
    v.reason = std::move(why);
    return v;
  };
  std::vector<Parsed> parsed(lines.size());
  uint64_t expected = 0;  // seq the next entry must carry (0: any, for an unanchored start)
  if (anchored) expected = 1;
  for (size_t i = 0; i < lines.size(); ++i) {
    uint64_t at = expected ? expected : 1;
    parsed[i] = parse_entry(lines[i]);
    const Parsed& p = parsed[i];
    if (!p.ok) return fail(at, "line " + std::to_string(i + 1) + " is not a journal entry (edited or torn)");
    if (i == 0) v.first_seq = p.seq;
    if (expected && p.seq != expected) {
      if (p.seq > expected)
        return fail(expected, "entry " + std::to_string(expected) + " is missing (next line has seq " +
                                  std::to_string(p.seq) + ")");
      return fail(expected, "line " + std::to_string(i + 1) + " has seq " + std::to_string(p.seq) + ", expected " +
                                std::to_string(expected));
    }
    if (i == 0) {
      if (anchored && p.prev != kJournalGenesis) return fail(p.seq, "first entry does not start the chain");
    } else if (p.prev != sha256_hex(lines[i - 1])) {
      // Who changed: line i-1 (then line i+1, or the head, still vouches for
      // line i) or line i itself.
      bool next_vouches = false;
      if (i + 1 < lines.size()) {
        Parsed n = parse_entry(lines[i + 1]);
        next_vouches = n.ok && n.prev == sha256_hex(lines[i]);
      } else if (head) {
        next_vouches = head->hash == sha256_hex(lines[i]);
      }
      if (next_vouches) return fail(p.seq - 1, "entry " + std::to_string(p.seq - 1) + " was changed after it was written");
      return fail(p.seq, "entry " + std::to_string(p.seq) + " does not match the chain (prev or line changed)");
    }
    expected = p.seq + 1;
    ++v.entries;
  }
  if (head && head->seq > 0) {
    if (lines.empty()) return fail(anchored ? 1 : head->seq, "the journal is empty but " + std::to_string(head->seq) + " entries were written");
    uint64_t last = expected - 1;
    if (last < head->seq)
      return fail(last + 1, "entries " + std::to_string(last + 1) + ".." + std::to_string(head->seq) +
                                " are missing (truncated)");
    if (last > head->seq) return fail(head->seq + 1, "entries after " + std::to_string(head->seq) + " were added");
    if (sha256_hex(lines.back()) != head->hash)
      return fail(last, "entry " + std::to_string(last) + " was changed after it was written");
  }
  return v;
}

std::vector<std::string_view> split_lines(std::string_view text, bool* torn_tail) {
  std::vector<std::string_view> out;
  size_t p = 0;
  if (torn_tail) *torn_tail = false;
  while (p < text.size()) {
    size_t nl = text.find('\n', p);
    if (nl == std::string_view::npos) {
      out.push_back(text.substr(p));
      if (torn_tail) *torn_tail = true;
      break;
    }
    out.push_back(text.substr(p, nl - p));
    p = nl + 1;
  }
  return out;
}

}  // namespace execd::protocol
