// execd/api/journal: see header.
#include "execd/api/journal.h"

#include <string>

#include "execd/journal/entries.h"
#include "execd/limits.h"
#include "protocol/errors.h"
#include "protocol/resume.h"

namespace execd::api {

namespace codes = protocol::codes;
using ojson = nlohmann::ordered_json;

namespace {

bool query_true(const http::Exchange& ex, const char* name) {
  const std::string* v = protocol::query_value(ex.query, name);
  return v && (*v == "true" || *v == "1");
}

bool disabled(journal::Journal& j, http::Exchange& ex) {
  if (j.enabled()) return false;
  ex.respond_error(404, codes::kNotFound, "the execution journal is disabled (--no-journal)");
  return true;
}

// POST /journal/events[?source=NAME]: one JSON object, an array of them,
// or NDJSON (Content-Type: application/x-ndjson). Each becomes an entry
// {"seq","prev","type":"harness","time","source","event":<as sent, minified>};
// all or none of one request are appended. The body is a buffered body
// (--max-body); each event at most --journal-event-max-bytes.
void handle_events(journal::Journal& journal, const Context& ctx, http::Exchange& ex) {
  constexpr size_t kMaxEvents = 1000;
  if (disabled(journal, ex)) return;
  const std::string* type = ex.header("content-type");
  bool ndjson = type && type->find("ndjson") != std::string::npos;
  auto decoded = protocol::decode_journal_events(ex.request().body, ndjson,
                                                 static_cast<size_t>(ctx.config.journal_event_max_bytes), kMaxEvents);
  if (auto* err = std::get_if<protocol::JournalEventsError>(&decoded))
    return ex.respond_error(400, codes::kInvalidRequestBody, err->message);
  std::string source;
  if (const std::string* s = protocol::query_value(ex.query, "source")) source = *s;
  if (source.size() > 256) return ex.respond_error(400, codes::kInvalidRequestBody, "source is longer than 256 bytes");
  const auto& events = std::get<std::vector<std::string>>(decoded);
  uint64_t first = journal.chain().seq + 1;
  for (const auto& raw : events) journal.append(journal::harness_entry(source), "event", raw);
  protocol::JournalHead chain = journal.chain();
  if (chain.seq < first + events.size() - 1)
    return ex.respond_error(500, codes::kRuntimeError, "the journal could not be written (see execd's log)");
  // Accepted but waiting for the disk (full): they are in the chain and are
  // written, in order, once the disk takes them; 202 says they are not yet.
  size_t unsaved = journal.unsaved();
  ojson out;
  out["appended"] = events.size();
  out["first_seq"] = first;
  out["last_seq"] = chain.seq;
  out["head"] = chain.hash;
  if (unsaved) out["unsaved"] = unsaved;
  ex.respond_json(unsaved ? 202 : 200, out.dump());
}

}  // namespace

void add_journal_routes(RouteTable& routes, journal::Journal& journal) {
  routes.add("POST", "/journal/events",
             [&journal](http::Exchange& ex) { handle_events(journal, journal.context(), ex); });
  routes.add("GET", "/journal", [&journal](http::Exchange& ex) {
    if (disabled(journal, ex)) return;
    uint64_t since = 0;
    if (const std::string* raw = protocol::query_value(ex.query, "since")) {
      auto v = protocol::parse_offset(*raw);
      if (!v) return ex.respond_error(400, codes::kInvalidRequestBody, "since must be a non-negative integer");
      since = *v;
    }
    bool follow = query_true(ex, "follow");
    if (follow && !admit(ex, journal.followers(), journal.max_followers(), "journal followers",
                         "max-journal-followers"))
      return;
    journal::serve_journal(ex, journal, since, follow);
  });
  routes.add("GET", "/journal/verify", [&journal](http::Exchange& ex) {
    if (disabled(journal, ex)) return;
    journal::verify_journal(ex, journal);
  });
}

}  // namespace execd::api
