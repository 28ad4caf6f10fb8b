// tests/unit/test_watch.cc — the file-change feed and track_changes:
// inotify records and feed lines (protocol/watch), the folding of a run's
// events into one entry per path (protocol/changes), the journal's harness
// events (protocol/journal), who was active when (execd/activity), and a
// watch on a real loop and a real directory (execd/watch): renames with both
// paths, new directories followed, a renamed directory's events under its
// new name, writes coalesced, settle, and the ring letting go of old events.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "execd/activity.h"
#include "execd/watch/watch.h"
#include "loop_scratch.h"
#include "protocol/changes.h"
#include "protocol/journal.h"
#include "protocol/watch.h"

using namespace execd;
using namespace execd::protocol;

namespace {

std::string record(int32_t wd, uint32_t mask, uint32_t cookie, const std::string& name, uint32_t pad_to = 0) {
  uint32_t len = name.empty() ? 0 : static_cast<uint32_t>(std::max<size_t>(pad_to, (name.size() + 1 + 3) / 4 * 4));
  std::string out(16 + len, '\0');
  memcpy(out.data(), &wd, 4);
  memcpy(out.data() + 4, &mask, 4);
  memcpy(out.data() + 8, &cookie, 4);
  memcpy(out.data() + 12, &len, 4);
  memcpy(out.data() + 16, name.data(), name.size());
  return out;
}

WatchEvent ev(WatchKind k, std::string path, std::string from = "", EntryType t = EntryType::file) {
  WatchEvent e;
  e.kind = k;
  e.path = std::move(path);
  e.from = std::move(from);
  e.entry = t;
  return e;
}

std::string ops(ChangeSet& s) {
  std::string out;
  for (auto& c : s.take()) {
    out += c.path + "=" + change_op_name(c.op);
    if (!c.from.empty()) out += "<" + c.from;
    if (c.content_changed) out += "+";
    if (c.concurrent) out += "*";
    out += " ";
  }
  return out;
}

}  // namespace

TEST_CASE("inotify records: every split, names without padding, cut records left") {
  std::string buf = record(1, IN_CREATE, 0, "a.txt") + record(2, IN_MOVED_FROM, 7, "long-name-here", 32) +
                    record(1, IN_DELETE_SELF, 0, "");
  std::vector<InotifyRecord> out;
  CHECK(parse_inotify_records(reinterpret_cast<const uint8_t*>(buf.data()), buf.size(), out) == buf.size());
  REQUIRE(out.size() == 3);
  CHECK(out[0].name == "a.txt");
  CHECK(out[1].cookie == 7);
  CHECK(out[1].name == "long-name-here");
  CHECK(out[2].name.empty());
  for (size_t cut = 0; cut < buf.size(); ++cut) {
    out.clear();
    size_t used = parse_inotify_records(reinterpret_cast<const uint8_t*>(buf.data()), cut, out);
    CHECK(used <= cut);
    for (const auto& r : out) CHECK(r.name.size() < 64);
  }
  std::string bad = record(1, IN_CREATE, 0, "x");
  uint32_t huge = 1u << 30;
  memcpy(bad.data() + 12, &huge, 4);
  out.clear();
  CHECK(parse_inotify_records(reinterpret_cast<const uint8_t*>(bad.data()), bad.size(), out) == 0);
  CHECK(out.empty());
}

TEST_CASE("feed lines: one JSON object each, with what the client needs") {
  WatchEvent e = ev(WatchKind::rename, "/w/b", "/w/a");
  e.seq = 42;
  e.stat.exists = true;
  e.stat.type = EntryType::file;
  e.stat.size = 3;
  e.stat.mtime_ms = 1000;
  e.stat.mode = 0644;
  e.ts_ms = 7;
  std::string line;
  encode_watch_event(line, e);
  REQUIRE(line.back() == '\n');
  auto j = nlohmann::json::parse(line);
  CHECK(j["seq"] == 42);
  CHECK(j["type"] == "rename");
  CHECK(j["from"] == "/w/a");
  CHECK(j["path"] == "/w/b");
  CHECK(j["entry"] == "file");
  CHECK(j["size"] == 3);
  CHECK(j["mode"] == "644");
  line.clear();
  WatchEvent gone = ev(WatchKind::remove, "/w/\xff\n", "", EntryType::dir);
  encode_watch_event(line, gone);
  CHECK(std::count(line.begin(), line.end(), '\n') == 1);  // a raw newline in a name stays escaped
  auto g = nlohmann::json::parse(line);
  CHECK(g["entry"] == "dir");
  CHECK_FALSE(g.contains("size"));
  line.clear();
  encode_watch_gap(line, 5, 9, "not retained", 1);
  auto gap = nlohmann::json::parse(line);
  CHECK(gap["since"] == 5);
  CHECK(gap["continues_after"] == 9);
}

TEST_CASE("watch query: path required, recursive and since checked") {
  std::string err;
  std::string p = "/w", t = "true", s = "12", bad = "x";
  auto q = decode_watch_query(&p, &t, &s, err);
  REQUIRE(q);
  CHECK(q->recursive);
  CHECK(q->since == 12u);
  CHECK_FALSE(decode_watch_query(nullptr, nullptr, nullptr, err));
  CHECK(err.find("path") != std::string::npos);
  CHECK_FALSE(decode_watch_query(&p, &bad, nullptr, err));
  CHECK_FALSE(decode_watch_query(&p, nullptr, &bad, err));
  std::string nul("a\0b", 3);
  CHECK_FALSE(decode_watch_query(&nul, nullptr, nullptr, err));
}

TEST_CASE("change set: one entry per path, as a reviewer would want it") {
  ChangeSet s(100);
  s.add(ev(WatchKind::create, "/w/new"), false);
  s.add(ev(WatchKind::write, "/w/new"), false);
  s.add(ev(WatchKind::write, "/w/old"), false);
  s.add(ev(WatchKind::create, "/w/tmp"), false);
  s.add(ev(WatchKind::remove, "/w/tmp"), false);
  s.add(ev(WatchKind::remove, "/w/gone"), true);
  s.add(ev(WatchKind::rename, "/w/b", "/w/a"), false);
  s.add(ev(WatchKind::write, "/w/b"), false);
  CHECK(ops(s) == "/w/b=renamed</w/a+ /w/gone=removed* /w/new=created /w/old=modified ");

  // An editor's save: write a temporary file, rename it over the original.
  s.add(ev(WatchKind::create, "/w/.f.swp"), false);
  s.add(ev(WatchKind::write, "/w/.f.swp"), false);
  s.add(ev(WatchKind::rename, "/w/f", "/w/.f.swp"), false);
  CHECK(ops(s) == "/w/f=created ");

  // Removed, then made again: replaced.
  s.add(ev(WatchKind::remove, "/w/x"), false);
  s.add(ev(WatchKind::create, "/w/x"), false);
  // Renamed away and back again: nothing.
  s.add(ev(WatchKind::rename, "/w/y2", "/w/y"), false);
  s.add(ev(WatchKind::rename, "/w/y", "/w/y2"), false);
  // Renamed, then removed: the original is gone.
  s.add(ev(WatchKind::rename, "/w/z2", "/w/z"), false);
  s.add(ev(WatchKind::remove, "/w/z2"), false);
  CHECK(ops(s) == "/w/x=modified /w/z=removed ");
}

TEST_CASE("change set: a renamed directory carries its entries along") {
  ChangeSet s(100);
  s.add(ev(WatchKind::create, "/w/d", "", EntryType::dir), false);
  s.add(ev(WatchKind::create, "/w/d/f"), false);
  s.add(ev(WatchKind::write, "/w/keep/x"), false);
  s.add(ev(WatchKind::rename, "/w/e", "/w/d", EntryType::dir), false);
  s.add(ev(WatchKind::rename, "/w/keep2", "/w/keep", EntryType::dir), false);
  CHECK(ops(s) == "/w/e=created /w/e/f=created /w/keep2=renamed</w/keep /w/keep2/x=modified ");
}

TEST_CASE("change set: bounded, the rest counted; gaps and a lost root said") {
  ChangeSet s(2);
  s.add(ev(WatchKind::create, "/w/1"), false);
  s.add(ev(WatchKind::create, "/w/2"), false);
  s.add(ev(WatchKind::create, "/w/3"), false);
  s.add(ev(WatchKind::write, "/w/1"), false);  // already listed: no new entry
  s.add(ev(WatchKind::gap, ""), false);
  WatchEvent gone = ev(WatchKind::gone, "/w");
  gone.reason = "removed";
  s.add(gone, false);
  CHECK(s.size() == 2);
  CHECK(s.dropped() == 1);
  CHECK(s.overflow());
  CHECK(s.error().find("/w") != std::string::npos);
}

TEST_CASE("change summary: JSON out and back (a record reloaded after a restart)") {
  ChangeSummary sum;
  sum.roots = {"/w"};
  ChangeEntry a;
  a.path = "/w/a";
  a.op = ChangeOp::renamed;
  a.from = "/w/z";
  a.content_changed = true;
  a.concurrent = true;
  a.stat.exists = true;
  a.stat.type = EntryType::file;
  a.stat.size = 5;
  a.stat.mode = 0600;
  a.sha256 = std::string(64, 'a');
  ChangeEntry b;
  b.path = "/w/b";
  b.op = ChangeOp::removed;
  b.entry = EntryType::dir;
  sum.entries = {a, b};
  sum.dropped = 3;
  sum.overflow = true;
  sum.concurrent_runs = {"other"};
  std::string text = changes_json(sum).dump();
  auto back = decode_changes_json(text);
  REQUIRE(back);
  CHECK(changes_json(*back).dump() == text);
  auto j = nlohmann::json::parse(text);
  CHECK(j["truncated"] == true);
  CHECK(j["possibly_concurrent"] == 1);
  CHECK(j["entries"][0]["content_changed"] == true);
  CHECK_FALSE(decode_changes_json("{\"roots\":1}"));
  CHECK_FALSE(decode_changes_json("not json"));
}

TEST_CASE("journal: harness events, validated and kept as sent") {
  auto one = decode_journal_events(R"({"tool": "edit", "n": [1, 2]})", false, 1024, 10);
  REQUIRE(std::holds_alternative<std::vector<std::string>>(one));
  CHECK(std::get<std::vector<std::string>>(one)[0] == R"({"tool":"edit","n":[1,2]})");
  auto many = decode_journal_events("{\"a\":1}\n\n{\"b\":2}\n", true, 1024, 10);
  REQUIRE(std::holds_alternative<std::vector<std::string>>(many));
  CHECK(std::get<std::vector<std::string>>(many).size() == 2);
  auto arr = decode_journal_events("[{\"a\":1},{\"b\":2}]", false, 1024, 10);
  CHECK(std::get<std::vector<std::string>>(arr).size() == 2);
  for (const char* bad : {"", "[]", "[1]", "\"x\"", "{", "[{\"a\":1},2]"}) {
    CAPTURE(bad);
    CHECK(std::holds_alternative<JournalEventsError>(decode_journal_events(bad, false, 1024, 10)));
  }
  CHECK(std::holds_alternative<JournalEventsError>(decode_journal_events("{\"a\":\"0123456789\"}", false, 10, 10)));
  CHECK(std::holds_alternative<JournalEventsError>(decode_journal_events("[{},{},{}]", false, 100, 2)));
  nlohmann::ordered_json body;
  body["type"] = "harness";
  std::string line = journal_line(3, kJournalGenesis, body, "event", R"({"x":1})");
  CHECK(line == std::string(R"({"seq":3,"prev":")") + kJournalGenesis + R"(","type":"harness","event":{"x":1}})");
  CHECK(journal_line_seq(line) == 3u);
}

TEST_CASE("activity: who was active since an epoch") {
  Activity a;
  uint64_t e0 = a.epoch();
  a.begin("x");
  uint64_t e1 = a.epoch();
  a.begin("y");
  a.end("y");
  CHECK(a.active_since(a.epoch()) == std::vector<std::string>{"x"});
  CHECK(a.active_since(e1) == std::vector<std::string>{"x", "y"});
  CHECK(a.active_since(e0) == std::vector<std::string>{"x", "y"});
  a.end("x");
  CHECK(a.active_since(a.epoch()).empty());
  a.set_probe([](std::vector<std::string>& out) { out.push_back("pty:1"); });
  CHECK(a.active_since(a.epoch()) == std::vector<std::string>{"pty:1"});
  Activity old;
  for (int i = 0; i < 3000; ++i) {
    old.begin("r" + std::to_string(i));
    old.end("r" + std::to_string(i));
  }
  auto v = old.active_since(1);  // further back than it keeps: "unknown"
  CHECK(std::find(v.begin(), v.end(), "?") != v.end());
}

TEST_CASE("activity: the kept changes wrap around their rings, names of any length") {
  // Against a model that keeps every change: a span the rings still hold
  // must be answered exactly, one they do not with "?"; the newest 150
  // changes always fit (at most 255 bytes a name in 48 KiB).
  Activity a;
  std::vector<std::pair<uint64_t, std::string>> all;
  std::multiset<std::string> active;
  uint32_t seed = 12345;
  auto next = [&] { return seed = seed * 1103515245u + 12345u, (seed >> 8) & 0xffff; };
  for (int i = 0; i < 6000; ++i) {
    size_t len = next() % 4 == 0 ? next() % 300 : 32;
    std::string name(len, static_cast<char>('a' + next() % 26));
    if (!name.empty()) name[0] = static_cast<char>('A' + i % 26);
    if (name.size() > 2) name[1] = static_cast<char>('0' + i % 10);
    a.begin(name);
    all.emplace_back(a.epoch(), name.substr(0, 255));
    active.insert(name);
    if (next() % 3 != 0) {
      a.end(name);
      all.emplace_back(a.epoch(), name.substr(0, 255));
      active.erase(active.find(name));
    }
    if (i % 97 != 0) continue;
    for (uint64_t back : {1ull, 10ull, 149ull, 400ull, 1500ull}) {
      if (back > a.epoch()) continue;
      uint64_t since = a.epoch() - back;
      std::vector<std::string> want(active.begin(), active.end());
      for (auto& [e, n] : all)
        if (e > since) want.push_back(n);
      std::sort(want.begin(), want.end());
      want.erase(std::unique(want.begin(), want.end()), want.end());
      std::vector<std::string> got = a.active_since(since);
      auto unknown = std::find(got.begin(), got.end(), "?");
      CAPTURE(i);
      CAPTURE(back);
      if (back < 150) REQUIRE(unknown == got.end());
      if (unknown != got.end()) {
        got.erase(unknown);
        // What is answered is still right, only older changes are missing.
        for (const std::string& n : got) CHECK(std::binary_search(want.begin(), want.end(), n));
      } else {
        CHECK(got == want);
      }
    }
  }
}

namespace {

struct Collect final : watch::Tap, watch::Follower {
  std::vector<WatchEvent> events;
  int woken = 0;
  void on_event(const WatchEvent& e, const watch::Actors&) override { events.push_back(e); }
  void on_events() override { ++woken; }
  bool has(WatchKind k, const std::string& path, const std::string& from = "") const {
    for (const auto& e : events)
      if (e.kind == k && e.path == path && (from.empty() || e.from == from)) return true;
    return false;
  }
  int count(WatchKind k, const std::string& path) const {
    int n = 0;
    for (const auto& e : events) n += e.kind == k && e.path == path;
    return n;
  }
};

struct WatchWorld : LoopScratch {
  Activity activity;
  std::unique_ptr<watch::Hub> hub;
  watch::Watch* w = nullptr;
  Collect c;
  explicit WatchWorld(watch::Settings s = {}) { hub = std::make_unique<watch::Hub>(&loop, s, activity); }
  ~WatchWorld() {
    if (w) {
      w->untap(&c);
      w->unfollow(&c);
      w->release();
    }
    hub->close();
    run_until([&] { return hub->count() == 0; });
    hub.reset();
    if (system(("rm -rf " + dir + "/*").c_str()) != 0) FAIL("cannot clean " << dir);
  }
  void open(bool recursive = true) {
    bool done = false;
    hub->open(dir, recursive, [&](watch::Watch* got, std::optional<ApiError> err) {
      REQUIRE_FALSE(err);
      w = got;
      done = true;
    });
    run_until([&] { return done; });
    REQUIRE(w);
    w->tap(&c);
    w->follow(&c);
  }
  void settle() {
    bool settled = false;
    w->settle([&] { settled = true; });
    run_until([&] { return settled; });
    REQUIRE(settled);
  }
  std::string p(const std::string& rel) const { return dir + "/" + rel; }
};

void write_file(const std::string& path, const std::string& data) {
  FILE* f = fopen(path.c_str(), "w");
  REQUIRE(f);
  fputs(data.c_str(), f);
  fclose(f);
}

}  // namespace

TEST_CASE("watch: renames with both paths, new directories followed, moved directories keep reporting") {
  WatchWorld x;
  x.open();
  write_file(x.p("a"), "1");
  REQUIRE(rename(x.p("a").c_str(), x.p("b").c_str()) == 0);
  REQUIRE(mkdir(x.p("d").c_str(), 0755) == 0);
  REQUIRE(mkdir(x.p("d/e").c_str(), 0755) == 0);
  write_file(x.p("d/e/f"), "hi");
  x.settle();
  CHECK(x.c.has(WatchKind::create, x.p("a")));
  CHECK(x.c.has(WatchKind::rename, x.p("b"), x.p("a")));
  CHECK(x.c.has(WatchKind::create, x.p("d/e")));
  CHECK(x.c.has(WatchKind::create, x.p("d/e/f")));
  REQUIRE(rename(x.p("d").c_str(), x.p("dd").c_str()) == 0);
  x.settle();
  write_file(x.p("dd/e/g"), "later");
  REQUIRE(unlink(x.p("dd/e/f").c_str()) == 0);
  x.settle();
  CHECK(x.c.has(WatchKind::rename, x.p("dd"), x.p("d")));
  CHECK(x.c.has(WatchKind::create, x.p("dd/e/g")));  // the new name, not the old one
  CHECK(x.c.has(WatchKind::remove, x.p("dd/e/f")));
  CHECK(x.w->directories() == 3);
  CHECK(x.c.woken > 0);
  // Seqs increase, and the ring hands back the same lines.
  uint64_t last = 0;
  for (const auto& e : x.c.events) {
    CHECK(e.seq > last);
    last = e.seq;
  }
  std::string lines;
  CHECK(x.w->read(x.w->start_seq(), 1 << 20, lines) == last);
  CHECK(std::count(lines.begin(), lines.end(), '\n') == static_cast<long>(x.c.events.size()));
}

TEST_CASE("watch: writes to one file coalesce; a non-recursive watch stays at its level") {
  watch::Settings s;
  s.coalesce_ms = 60000;  // only the close reports a write
  WatchWorld x(s);
  x.open(false);
  int fd = ::open(x.p("log").c_str(), O_CREAT | O_WRONLY, 0644);
  REQUIRE(fd >= 0);
  for (int i = 0; i < 100; ++i) REQUIRE(::write(fd, "x", 1) == 1);
  ::close(fd);
  REQUIRE(mkdir(x.p("sub").c_str(), 0755) == 0);
  write_file(x.p("sub/inner"), "no");
  x.settle();
  CHECK(x.c.count(WatchKind::write, x.p("log")) == 1);
  CHECK(x.c.has(WatchKind::create, x.p("sub")));
  CHECK_FALSE(x.c.has(WatchKind::create, x.p("sub/inner")));
  for (const auto& e : x.c.events)
    if (e.kind == WatchKind::write) CHECK(e.stat.size == 100);  // the size after the last write
}

TEST_CASE("watch: the ring keeps the newest events; what it let go of is below floor()") {
  watch::Settings s;
  s.ring_bytes = 4096;
  WatchWorld x(s);
  x.open(false);
  for (int i = 0; i < 200; ++i) write_file(x.p("f" + std::to_string(i)), "");
  x.settle();
  CHECK(x.w->floor() > x.w->start_seq());
  CHECK(x.w->ring_bytes() <= 4096);
  std::string out;
  uint64_t got = x.w->read(0, 1 << 20, out);
  CHECK(got == x.w->last_seq());
  CHECK(out.size() <= 4096);
}

TEST_CASE("watch: the root removed ends it with `gone`") {
  WatchWorld x;
  std::string sub = x.dir + "/root";
  REQUIRE(mkdir(sub.c_str(), 0755) == 0);
  bool done = false;
  x.hub->open(sub, true, [&](watch::Watch* got, std::optional<ApiError> err) {
    REQUIRE_FALSE(err);
    x.w = got;
    done = true;
  });
  x.run_until([&] { return done; });
  x.w->tap(&x.c);
  REQUIRE(rmdir(sub.c_str()) == 0);
  x.run_until([&] { return x.w->gone(); });
  CHECK(x.w->gone());
  CHECK(x.c.has(WatchKind::gone, sub));
}

TEST_CASE("watch hub: the limit is checked before an inotify instance is taken; missing roots are 404") {
  watch::Settings s;
  s.max_watches = 1;
  WatchWorld x(s);
  x.open();
  std::string other = x.dir + "/o";
  REQUIRE(mkdir(other.c_str(), 0755) == 0);
  std::optional<ApiError> err;
  bool done = false;
  x.hub->open(other, true, [&](watch::Watch* got, std::optional<ApiError> e) {
    CHECK(got == nullptr);
    err = e;
    done = true;
  });
  x.run_until([&] { return done; });
  REQUIRE(err);
  CHECK(err->status == 429);
  // The same root again shares the watch.
  done = false;
  x.hub->open(x.dir, true, [&](watch::Watch* got, std::optional<ApiError> e) {
    CHECK(got == x.w);
    CHECK_FALSE(e);
    got->release();
    done = true;
  });
  x.run_until([&] { return done; });
  done = false;
  x.hub->open(x.dir + "/missing", true, [&](watch::Watch* got, std::optional<ApiError> e) {
    REQUIRE(e);
    CHECK(e->status == 404);
    done = true;
  });
  x.run_until([&] { return done; });
}
