// tests/unit/test_resume.cc — the pure parts of resumable executions:
// client ids, offsets, the per-stream output index, stdin retries
// (protocol/resume), stored execution records (protocol/execution_record) and
// the journal chain (protocol/journal).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "protocol/execution_record.h"
#include "protocol/journal.h"
#include "protocol/resume.h"
#include "protocol/sha.h"

using namespace execd::protocol;

TEST_CASE("client ids: [A-Za-z0-9._-]{1,128}") {
  CHECK(valid_client_id("a"));
  CHECK(valid_client_id("Job-1.retry_2"));
  CHECK(valid_client_id(std::string(128, 'x')));
  CHECK_FALSE(valid_client_id(""));
  CHECK_FALSE(valid_client_id(std::string(129, 'x')));
  for (const char* bad : {"a b", "a/b", "../x", "é", "a\nb", "a:b", "a%2f"}) {
    CAPTURE(bad);
    CHECK_FALSE(valid_client_id(bad));
  }
}

TEST_CASE("offsets: plain non-negative decimals only") {
  CHECK(parse_offset("0") == 0u);
  CHECK(parse_offset("123") == 123u);
  CHECK(parse_offset("18446744073709551615") == UINT64_MAX);
  for (const char* bad : {"", "-1", "+1", " 1", "1 ", "0x10", "1.5", "18446744073709551616", "abc"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_offset(bad).has_value());
  }
}

TEST_CASE("stdin retries: skip what was accepted, refuse a gap") {
  auto p = plan_stdin_write(10, std::nullopt);
  CHECK_FALSE(p.gap);
  CHECK(p.skip == 0);
  p = plan_stdin_write(10, 10);
  CHECK(p.skip == 0);
  p = plan_stdin_write(10, 4);
  CHECK(p.skip == 6);
  p = plan_stdin_write(10, 11);
  CHECK(p.gap);
}

TEST_CASE("output index: per-stream offsets in the combined log") {
  OutputIndex idx;
  idx.add(0, 5);  // out 0..5   at 0..5
  idx.add(0, 3);  // merged: out 0..8 at 0..8
  idx.add(1, 4);  // err 0..4   at 8..12
  idx.add(0, 2);  // out 8..10  at 12..14
  CHECK(idx.segments().size() == 3);
  CHECK(idx.end() == 14);
  CHECK(idx.stored(0) == 10);
  CHECK(idx.stored(1) == 4);
  CHECK(idx.locate(0, 0) == 0);
  CHECK(idx.locate(0, 7) == 7);
  CHECK(idx.locate(0, 8) == 12);
  CHECK(idx.locate(0, 9) == 13);
  CHECK(idx.locate(0, 10) == 14);  // not stored: the end
  CHECK(idx.locate(1, 0) == 8);
  CHECK(idx.locate(1, 3) == 11);
  CHECK(idx.locate(1, 4) == 14);
  auto pieces = idx.pieces(6, 13);
  REQUIRE(pieces.size() == 3);
  CHECK(pieces[0].at == 6);
  CHECK(pieces[0].stream_at == 6);
  CHECK(pieces[0].len == 2);
  CHECK(pieces[1].stream == 1);
  CHECK(pieces[1].len == 4);
  CHECK(pieces[2].at == 12);
  CHECK(pieces[2].stream_at == 8);
  CHECK(pieces[2].len == 1);
}

TEST_CASE("output index: on disk, torn entries and a short log") {
  std::string file = OutputIndex::encode_entry(0, 100) + OutputIndex::encode_entry(1, 50) +
                     OutputIndex::encode_entry(0, 1000);
  auto full = OutputIndex::decode(file, 1150);
  CHECK(full.end() == 1150);
  CHECK(full.stored(0) == 1100);
  // A crash: the last entry is torn.
  auto torn = OutputIndex::decode(file.substr(0, file.size() - 3), 1150);
  CHECK(torn.end() == 150);
  // The log file holds less than the index says.
  auto short_log = OutputIndex::decode(file, 120);
  CHECK(short_log.end() == 120);
  CHECK(short_log.stored(1) == 20);
  // Garbage channel byte stops the walk.
  std::string bad = file;
  bad[9] = 7;
  CHECK(OutputIndex::decode(bad, 1150).end() == 100);
}

TEST_CASE("output index: the newest bytes kept, events as a third channel") {
  OutputIndex idx;
  idx.add(0, 10);  // out 0..10  at 0..10
  idx.add(2, 5);   // ev  0..5   at 10..15
  idx.add(1, 10);  // err 0..10  at 15..25
  idx.add(0, 10);  // out 10..20 at 25..35
  idx.drop_before(12);
  CHECK(idx.first() == 12);
  CHECK(idx.start(0) == 10);  // stdout's first retained byte
  CHECK(idx.start(1) == 0);
  CHECK(idx.start(2) == 2);
  CHECK(idx.locate(0, 3) == 12);   // let go of: the first retained byte
  CHECK(idx.locate(0, 12) == 27);
  CHECK(idx.locate(1, 4) == 19);
  auto p = idx.pieces(0, 40);
  REQUIRE(p.size() == 3);
  CHECK(p[0].at == 12);
  CHECK(p[0].stream == 2);
  CHECK(p[0].stream_at == 2);
  CHECK(p[0].len == 3);
  auto at = idx.position_at(20);
  CHECK(at.stream_at[0] == 10);
  CHECK(at.stream_at[1] == 5);
  CHECK(at.stream_at[2] == 5);
  // A failed write: what was never stored goes from the end.
  idx.truncate(30);
  CHECK(idx.end() == 30);
  CHECK(idx.stored(0) == 15);
  CHECK(idx.stored(1) == 10);
}

TEST_CASE("output index: segment files with headers follow on, or stop at a hole") {
  OutputIndex writer;
  std::string seg0 = OutputIndex::encode_header(writer.position());
  writer.add(0, 100);
  seg0 += OutputIndex::encode_entry(0, 100);
  std::string seg1 = OutputIndex::encode_header(writer.position());
  writer.add(1, 40);
  writer.add(0, 60);
  seg1 += OutputIndex::encode_entry(1, 40) + OutputIndex::encode_entry(0, 60);
  std::string seg2 = OutputIndex::encode_header(writer.position());
  writer.add(0, 50);
  seg2 += OutputIndex::encode_entry(0, 50);
  // The oldest segment was let go of: the index starts at segment 1.
  OutputIndex idx;
  REQUIRE(idx.decode_segment(seg1, 100));
  REQUIRE(idx.decode_segment(seg2, 50));
  CHECK(idx.first() == 100);
  CHECK(idx.start(0) == 100);
  CHECK(idx.start(1) == 0);
  CHECK(idx.end() == 250);
  CHECK(idx.stored(0) == 210);
  CHECK(idx.locate(0, 160) == 200);
  // A segment whose data file came up short leaves a hole: the next one
  // cannot be placed.
  OutputIndex holed;
  REQUIRE(holed.decode_segment(seg1, 70));
  CHECK_FALSE(holed.decode_segment(seg2, 50));
  CHECK(holed.end() == 170);
}

TEST_CASE("resume start: retained, let go of, never stored, or live") {
  auto r = plan_resume(10, 0, 100, 100);
  CHECK_FALSE(r.gap);
  CHECK(r.from == 10);
  r = plan_resume(150, 0, 100, 300);  // bytes 100..300 were not stored
  CHECK(r.gap);
  CHECK(r.from == 300);
  r = plan_resume(300, 0, 100, 300);  // from the live edge
  CHECK_FALSE(r.gap);
  r = plan_resume(5, 40, 100, 100);  // the log keeps the newest: from the first it has
  CHECK(r.gap);
  CHECK(r.from == 40);
  r = plan_resume(5, 100, 100, 100);  // nothing of it retained
  CHECK(r.gap);
  CHECK(r.from == 100);
}

TEST_CASE("stored execution: round trip and checksum") {
  StoredExecution c;
  c.id = "job-1";
  c.content = "echo \"hi\"\n";
  c.fingerprint = "abc";
  c.started_ns = 123;
  c.pgid = 4242;
  c.boot_id = "b";
  c.start_ticks = 99;
  c.finished = true;
  c.result.exit_code = 3;
  c.result.stdout_bytes = 7;
  c.result.stdout_sha256 = "ff";
  c.output_total = 7;
  std::string file = encode_stored_execution(c);
  auto back = decode_stored_execution(file);
  REQUIRE(back.has_value());
  CHECK(back->id == "job-1");
  CHECK(back->content == c.content);
  CHECK(back->result.exit_code == 3);
  CHECK(back->pgid == 4242);
  CHECK(back->start_ticks == 99);
  CHECK(back->finished);
  CHECK(back->kind == "command");
  // A code run keeps what makes its terminal event and status.
  c.kind = "code_run";
  c.owner = "ctx-1";
  c.language = "python";
  c.uid = 1000;
  c.result.status = "error";
  c.result.execution_count = 4;
  auto code = decode_stored_execution(encode_stored_execution(c));
  REQUIRE(code.has_value());
  CHECK(code->kind == "code_run");
  CHECK(code->owner == "ctx-1");
  CHECK(code->uid == 1000u);
  CHECK(code->result.status == "error");
  CHECK(code->result.execution_count == 4);
  // A record written before executions had kinds reads as a command.
  std::string old_line =
      R"({"v":1,"id":"o","content":"c","fingerprint":"f","background":false,"tty":false,"stdin":false,)"
      R"("started_ns":1,"finished_ns":2,"pgid":0,"boot_id":"b","start_ticks":0,"finished":true,"lost":false,)"
      R"("result":{"exit_code":0,"signal":"","signal_text":"","start_error":"","timed_out":false,)"
      R"("interrupted":false,"execution_time_ms":1,"stdout_bytes":0,"stderr_bytes":0,"stdout_sha256":"",)"
      R"("stderr_sha256":"","user_cpu_ms":0,"system_cpu_ms":0,"max_rss_kib":0},"output_total":0})";
  auto old = decode_stored_execution(old_line + "\nsha256:" + sha256_hex(old_line) + "\n");
  REQUIRE(old.has_value());
  CHECK(old->kind == "command");
  CHECK(old->result.exit_code == 0);
  // Torn anywhere, or edited: rejected.
  for (size_t cut : {size_t(0), size_t(10), file.size() / 2, file.size() - 2}) {
    CAPTURE(cut);
    CHECK_FALSE(decode_stored_execution(file.substr(0, cut)).has_value());
  }
  std::string edited = file;
  edited[edited.find("job-1")] = 'J';
  CHECK_FALSE(decode_stored_execution(edited).has_value());
}

TEST_CASE("request fingerprint: same request, same print") {
  CommandRequest a;
  a.command = "make test";
  a.envs = {{"A", "1"}, {"B", "2"}};
  CommandRequest b = a;
  b.id = "other-id";  // the id is not part of the request's meaning
  CHECK(request_fingerprint(a) == request_fingerprint(b));
  b.envs["B"] = "3";
  CHECK(request_fingerprint(a) != request_fingerprint(b));
  CommandRequest c = a;
  c.stdin_open = true;
  CHECK(request_fingerprint(a) != request_fingerprint(c));
}

namespace {
std::vector<std::string> chain(int n) {
  std::vector<std::string> lines;
  std::string prev = kJournalGenesis;
  for (int i = 1; i <= n; ++i) {
    nlohmann::ordered_json body;
    body["type"] = "command";
    body["n"] = i;
    lines.push_back(journal_line(static_cast<uint64_t>(i), prev, body));
    prev = sha256_hex(lines.back());
  }
  return lines;
}
std::vector<std::string_view> views(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }
JournalHead head_of(const std::vector<std::string>& v) {
  return {journal_line_seq(v.back()).value(), sha256_hex(v.back())};
}
}  // namespace

TEST_CASE("journal: a line starts with seq and prev") {
  auto lines = chain(2);
  CHECK(lines[0].rfind("{\"seq\":1,\"prev\":\"0000", 0) == 0);
  CHECK(lines[1].find(sha256_hex(lines[0])) != std::string::npos);
  CHECK(journal_line_seq(lines[1]) == 2u);
  CHECK_FALSE(journal_line_seq("{\"seq\":\"x\"}").has_value());
}

TEST_CASE("journal: a line is the object of seq, prev and the body's fields, byte for byte") {
  // journal_line splices seq and prev into the body's own dump; it must
  // give what dumping that whole object gives (hashes chain over the bytes).
  auto as_object = [](uint64_t seq, const std::string& prev, const nlohmann::ordered_json& body) {
    nlohmann::ordered_json j;
    j["seq"] = seq;
    j["prev"] = prev;
    if (body.is_object())
      for (auto it = body.begin(); it != body.end(); ++it)
        if (it.key() != "seq" && it.key() != "prev") j[it.key()] = it.value();
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  };
  std::vector<nlohmann::ordered_json> bodies;
  bodies.push_back(nlohmann::ordered_json::object());
  bodies.push_back(nlohmann::ordered_json());  // null: seq and prev alone
  nlohmann::ordered_json a;
  a["type"] = "command";
  a["command"] = "printf '\\n\"%s\"' \xce\xbb \xff";  // escapes, UTF-8 and a byte that is not
  a["exit_code"] = -1;
  a["files"] = nlohmann::ordered_json::array({nlohmann::ordered_json{{"path", "/a"}, {"sha256", nullptr}}});
  a["ratio"] = 0.5;
  bodies.push_back(a);
  nlohmann::ordered_json own = a;  // its own seq and prev are dropped
  own["seq"] = 99;
  own["prev"] = "mine";
  bodies.push_back(own);
  for (const auto& body : bodies) {
    CAPTURE(body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
    CHECK(journal_line(7, kJournalGenesis, body) == as_object(7, kJournalGenesis, body));
    std::string prev(64, 'a');
    CHECK(journal_line(12345678901ull, prev, body) == as_object(12345678901ull, prev, body));
  }
}

TEST_CASE("journal verify: intact, edited, deleted, truncated") {
  auto lines = chain(6);
  auto ok = verify_journal(views(lines), true, head_of(lines));
  CHECK(ok.ok);
  CHECK(ok.entries == 6);

  SUBCASE("an edited middle entry is named") {
    auto e = lines;
    e[2].replace(e[2].find("\"n\":3"), 5, "\"n\":9");
    auto v = verify_journal(views(e), true, head_of(lines));
    CHECK_FALSE(v.ok);
    CHECK(v.broken_at == 3);
  }
  SUBCASE("an edited prev names its own entry") {
    auto e = lines;
    e[3].replace(e[3].find("\"prev\":\"") + 8, 1, e[3][e[3].find("\"prev\":\"") + 8] == 'a' ? "b" : "a");
    auto v = verify_journal(views(e), true, head_of(lines));
    CHECK_FALSE(v.ok);
    CHECK(v.broken_at == 4);
  }
  SUBCASE("an edited last entry is caught by the head") {
    auto e = lines;
    e[5].replace(e[5].find("\"n\":6"), 5, "\"n\":7");
    auto v = verify_journal(views(e), true, head_of(lines));
    CHECK_FALSE(v.ok);
    CHECK(v.broken_at == 6);
  }
  SUBCASE("a deleted entry") {
    auto e = lines;
    e.erase(e.begin() + 1);
    auto v = verify_journal(views(e), true, head_of(lines));
    CHECK_FALSE(v.ok);
    CHECK(v.broken_at == 2);
  }
  SUBCASE("a truncated tail") {
    auto e = lines;
    e.resize(4);
    auto v = verify_journal(views(e), true, head_of(lines));
    CHECK_FALSE(v.ok);
    CHECK(v.broken_at == 5);
  }
  SUBCASE("a torn line") {
    auto e = lines;
    e[5] = e[5].substr(0, 20);
    auto v = verify_journal(views(e), true, head_of(lines));
    CHECK_FALSE(v.ok);
    CHECK(v.broken_at == 6);
  }
  SUBCASE("rotated away: an unanchored start is accepted") {
    std::vector<std::string> tail(lines.begin() + 3, lines.end());
    CHECK(verify_journal(views(tail), false, head_of(lines)).ok);
    CHECK_FALSE(verify_journal(views(tail), true, head_of(lines)).ok);
  }
}

TEST_CASE("split_lines flags a torn tail") {
  bool torn = false;
  auto l = split_lines("a\nb\nc", &torn);
  CHECK(l.size() == 3);
  CHECK(torn);
  l = split_lines("a\nb\n", &torn);
  CHECK(l.size() == 2);
  CHECK_FALSE(torn);
}
