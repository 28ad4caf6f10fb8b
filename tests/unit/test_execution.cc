// Unit tests for execd/exec (Execution, its readers, stdin, the registry and
// the record store) with a fake runner and a fake transport: a real libuv
// loop for the log's pool work, no process and no socket. Readers are
// exchanges on a Connection over the fake transport, whose budget decides
// how much the "client" takes.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <uv.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "execd/journal/journal.h"
#include "execd/context.h"
#include "execd/exec/reader.h"
#include "execd/exec/record_store.h"
#include "execd/exec/cold_records.h"
#include "execd/exec/registry.h"
#include "execd/exec/stdin.h"
#include "http_rig.h"
#include "loop_scratch.h"
#include "protocol/sha.h"

using namespace execd;
using exec::ExecutionReader;

namespace {

struct FakeRunner : exec::Runner {
  bool can_pause = true, keep_stdin = false;
  bool paused = false, stdin_closed = false;
  int interrupts = 0, unwatched_calls = 0;
  size_t queued = 0;
  std::string stdin_data;
  bool pausable() const override { return can_pause; }
  void set_paused(bool p) override { paused = p; }
  bool interrupt() override { return ++interrupts, true; }
  void unwatched() override { ++unwatched_calls; }
  bool has_stdin() const override { return keep_stdin; }
  void stdin_write(const char* d, size_t n) override { stdin_data.append(d, n); }
  size_t stdin_queued() const override { return queued; }
  void stdin_close() override { stdin_closed = true; }
};

std::string pattern(size_t n, size_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (seed + i) % 26);
  return s;
}

// The NDJSON events in what a fake transport received (chunked framing:
// every chunk holds whole events).
std::vector<nlohmann::json> events_in(const std::string& written) {
  std::vector<nlohmann::json> out;
  size_t body = written.find("\r\n\r\n");
  if (body == std::string::npos) return out;
  size_t at = body + 4;
  while (at < written.size()) {
    size_t eol = written.find("\r\n", at);
    if (eol == std::string::npos) break;
    size_t len = std::stoul(written.substr(at, eol - at), nullptr, 16);
    if (len == 0) break;
    std::string chunk = written.substr(eol + 2, len);
    at = eol + 2 + len + 2;
    size_t p = 0;
    while (p < chunk.size()) {
      size_t nl = chunk.find('\n', p);
      std::string line = chunk.substr(p, nl - p);
      if (!line.empty()) out.push_back(nlohmann::json::parse(line));
      p = nl == std::string::npos ? chunk.size() : nl + 1;
    }
  }
  return out;
}

// stdout bytes of exact events, checked contiguous from `from`.
std::string stdout_of(const std::vector<nlohmann::json>& events, uint64_t from) {
  std::string out;
  for (const auto& e : events)
    if (e["type"] == "stdout") {
      CHECK(e["offset"].get<uint64_t>() == from + out.size());
      out += e["text"].get<std::string>();
    }
  return out;
}

struct World : LoopScratch {
  Context ctx;
  WorkGate gate{4};
  std::unique_ptr<journal::Journal> journal;
  Activity activity;
  std::unique_ptr<exec::Registry> reg;

  explicit World(std::string state = "") {
    ctx.loop = &loop;
    ctx.config.state_dir = state.empty() ? dir : state;
    ctx.config.journal = false;
    journal = std::make_unique<journal::Journal>(ctx, gate);
    exec::RegistrySettings s;
    s.state_dir = ctx.config.state_dir;
    s.log_limit = 64 << 20;
    reg = std::make_unique<exec::Registry>(&loop, s, *journal, activity);
  }
  ~World() {
    reg->close();
    run_until([&] { return uv_loop_alive(&loop) == 0; });
    reg.reset();
    if (system(("rm -rf " + dir + "/*").c_str()) != 0) FAIL("cannot clean " << dir);
  }
  exec::Execution& start(const std::string& id, FakeRunner*& runner, uint64_t log_limit = 0, bool pausable = true) {
    exec::ExecutionSpec spec;
    spec.id = id;
    spec.content = "fake";
    exec::Execution& e = reg->create(spec, log_limit);
    auto r = std::make_unique<FakeRunner>();
    r->can_pause = pausable;
    runner = r.get();
    e.start(std::move(r));
    return e;
  }
  void out(exec::Execution& e, exec::Channel c, const std::string& s) {
    e.output(c, reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  void settle(exec::Execution& e) {
    run_until([&] { return e.log()->settled(); });
  }
};

// A reader of `e` on its own connection.
struct Client {
  rig::Rig r;
  ExecutionReader* reader = nullptr;
  Client(exec::Execution& e, ExecutionReader::Role role, uint64_t from_out = 0, uint64_t from_err = 0,
         size_t budget = SIZE_MAX) {
    r.t->budget = budget;
    r.host.on_head = [&, role, from_out, from_err](http::Exchange& ex) {
      auto rd = std::make_unique<ExecutionReader>(ex, e, role, protocol::Framing::exact, from_out, from_err);
      reader = rd.get();
      ex.attach(std::move(rd));
      ex.on_complete = [](http::Exchange&) {};  // the reader answers
      if (!e.starting()) reader->begin();
    };
    r.start();
    r.feed("GET /x HTTP/1.1\r\nHost: t\r\n\r\n");
  }
  std::vector<nlohmann::json> events() { return events_in(r.t->written); }
  bool ended() {
    auto ev = events();
    return !ev.empty() && (ev.back()["type"] == "execution_complete");
  }
  void open_up() {
    r.t->budget = SIZE_MAX;
    r.conn->on_transport_writable();
  }
};

}  // namespace

TEST_CASE("execution: resume at every offset class, from a log that kept the newest bytes") {
  World w;
  FakeRunner* runner;
  exec::Execution& e = w.start("r1", runner, 4000);
  std::string all_out, all_err;
  for (int i = 0; i < 20; ++i) {
    std::string o = pattern(500, i), er = pattern(15, 100 + i);
    all_out += o;
    all_err += er;
    w.out(e, exec::kStdout, o);
    w.out(e, exec::kStderr, er);
  }
  protocol::ExecutionResult r;
  r.exit_code = 0;
  e.finish(r);
  w.settle(e);
  const auto& idx = e.log()->index();
  uint64_t first_out = idx.start(0), first_err = idx.start(1);
  REQUIRE(first_out > 0);
  CHECK(idx.end() - idx.first() <= 4000);

  SUBCASE("from 0: one gap per stream, then everything retained, then the terminal event") {
    Client c(e, ExecutionReader::Role::resume);
    w.run_until([&] { return c.ended(); });
    auto ev = c.events();
    REQUIRE(ev.size() >= 4);
    CHECK(ev[0]["type"] == "init");
    CHECK(ev[2]["type"] == "gap");
    CHECK(ev[2]["available_from"] == first_out);
    CHECK(stdout_of(ev, first_out) == all_out.substr(first_out));
    CHECK(ev.back()["stdout_bytes"] == all_out.size());
    CHECK(ev.back()["stdout_sha256"] == protocol::sha256_hex(all_out));
    CHECK(ev.back()["stderr_sha256"] == protocol::sha256_hex(all_err));
  }
  SUBCASE("from the first retained bytes: no gap") {
    Client c(e, ExecutionReader::Role::resume, first_out, first_err);
    w.run_until([&] { return c.ended(); });
    auto ev = c.events();
    for (const auto& x : ev) CHECK(x["type"] != "gap");
    CHECK(stdout_of(ev, first_out) == all_out.substr(first_out));
  }
  SUBCASE("from the middle of what is retained") {
    uint64_t mid = first_out + 777;
    Client c(e, ExecutionReader::Role::resume, mid, all_err.size());
    w.run_until([&] { return c.ended(); });
    CHECK(stdout_of(c.events(), mid) == all_out.substr(mid));
  }
  SUBCASE("from the end: only the terminal event") {
    Client c(e, ExecutionReader::Role::resume, all_out.size(), all_err.size());
    w.run_until([&] { return c.ended(); });
    auto ev = c.events();
    REQUIRE(ev.size() == 3);
    CHECK(ev[2]["type"] == "execution_complete");
  }
}

TEST_CASE("execution: a live reader gets output as it comes, then the end") {
  World w;
  FakeRunner* runner;
  exec::Execution& e = w.start("live", runner);
  w.out(e, exec::kStdout, "before\n");
  Client c(e, ExecutionReader::Role::resume);
  w.run_until([&] { return stdout_of(c.events(), 0) == "before\n"; });
  w.out(e, exec::kStdout, "after\n");
  CHECK(stdout_of(c.events(), 0) == "before\nafter\n");  // live: at once, from memory
  e.finish({});
  CHECK(c.ended());
}

TEST_CASE("execution: a stalled original stream holds a run that can pause, and lets go when read") {
  World w;
  FakeRunner* runner;
  exec::Execution& e = w.start("hold", runner);
  Client c(e, ExecutionReader::Role::original, 0, 0, /*budget=*/0);
  CHECK_FALSE(runner->paused);
  // The write queue takes 1 MiB before it says "full".
  for (int i = 0; i < 40 && !runner->paused; ++i) w.out(e, exec::kStdout, pattern(64 << 10, i));
  CHECK(runner->paused);
  c.open_up();
  CHECK_FALSE(runner->paused);
  e.finish({});
  w.run_until([&] { return c.ended(); });
  CHECK(c.ended());
}

TEST_CASE("execution: a stalled resume reader does not slow the run while the log keeps its bytes") {
  World w;
  FakeRunner* runner;
  exec::Execution& e = w.start("fan", runner, 64 << 20);
  Client slow(e, ExecutionReader::Role::resume, 0, 0, /*budget=*/0);
  std::string all;
  for (int i = 0; i < 48; ++i) {
    std::string s = pattern(64 << 10, i);
    all += s;
    w.out(e, exec::kStdout, s);
    // Only the disk may hold the run back, never the stalled reader: once
    // the log has caught up, the run goes on.
    w.run_until([&] { return !e.log()->over_budget() && !runner->paused; });
    CHECK_FALSE(runner->paused);
  }
  e.finish({});
  slow.open_up();
  w.run_until([&] { return slow.ended(); });
  CHECK(stdout_of(slow.events(), 0) == all);
}

TEST_CASE("execution: a resume reader the log would have to let go of holds the run instead") {
  World w;
  FakeRunner* runner;
  exec::Execution& e = w.start("tight", runner, 1 << 20);
  Client slow(e, ExecutionReader::Role::resume, 0, 0, /*budget=*/0);
  std::string all;
  for (int i = 0; i < 64 && !runner->paused; ++i) {
    std::string s = pattern(64 << 10, i);
    all += s;
    w.out(e, exec::kStdout, s);
    uv_run(&w.loop, UV_RUN_NOWAIT);
  }
  // Past 1 MiB retained beyond what the reader's own write queue took.
  REQUIRE(runner->paused);
  CHECK(e.log()->over_limit());
  slow.open_up();
  w.run_until([&] { return !runner->paused; });
  CHECK_FALSE(runner->paused);
  e.finish({});
  w.run_until([&] { return slow.ended(); });
  CHECK(stdout_of(slow.events(), 0) == all);  // nothing lost
}

TEST_CASE("execution: an original stream of a run that cannot pause ends with OutputOverflow") {
  World w;
  FakeRunner* runner;
  exec::Execution& e = w.start("kernel", runner, 2 << 20, /*pausable=*/false);
  Client c(e, ExecutionReader::Role::original, 0, 0, /*budget=*/0);
  for (int i = 0; i < 128 && !c.ended(); ++i) {
    w.out(e, exec::kStdout, pattern(64 << 10, i));
    uv_run(&w.loop, UV_RUN_NOWAIT);
  }
  c.open_up();
  w.run_until([&] { return c.ended(); });
  auto ev = c.events();
  REQUIRE(ev.size() >= 2);
  CHECK(ev[ev.size() - 2]["type"] == "error");
  CHECK(ev[ev.size() - 2]["error"]["ename"] == "OutputOverflow");
  CHECK(ev.back()["status"] == "output_overflow");
  CHECK(runner->interrupts >= 1);
  e.finish({});
}

TEST_CASE("execution: stdin, a retried write applied once, EOF, and a write that waits too long") {
  World w;
  exec::ExecutionSpec spec;
  spec.id = "in";
  spec.stdin_open = true;
  exec::Execution& e = w.reg->create(spec);
  auto owned = std::make_unique<FakeRunner>();
  FakeRunner* runner = owned.get();
  runner->keep_stdin = true;
  e.start(std::move(owned));
  auto post = [&](const std::string& body, uint64_t skip, bool eof, int64_t timeout_ms) {
    auto c = std::make_unique<rig::Rig>();
    c->host.on_head = [&e, skip, eof, timeout_ms](http::Exchange& ex) {
      ex.stream_body = true;
      ex.invite_body = true;
      auto b = std::make_unique<exec::StdinBody>(ex, e, skip, eof, timeout_ms);
      exec::StdinBody& body_ref = *b;
      ex.attach(std::move(b));
      ex.on_complete = [&body_ref](http::Exchange&) { body_ref.complete(); };
    };
    c->start();
    c->feed("POST /command/in/stdin HTTP/1.1\r\nHost: t\r\nContent-Length: " + std::to_string(body.size()) +
            "\r\n\r\n" + body);
    return c;
  };
  auto first = post("hello", 0, false, 1000);
  CHECK(runner->stdin_data == "hello");
  CHECK(first->t->written.find("{\"offset\":5}") != std::string::npos);
  first.reset();
  // The same write again from offset 3 (its first answer was lost): only the new byte.
  auto retry = post("lo!", 2, true, 1000);
  CHECK(runner->stdin_data == "hello!");
  CHECK(runner->stdin_closed);
  CHECK(retry->t->written.find("{\"offset\":6}") != std::string::npos);
  retry.reset();
  CHECK(e.stdin_eof());
  CHECK_FALSE(e.stdin_writable());
  // A process that does not read: the write pauses its body, then 503 with the offset.
  exec::ExecutionSpec spec2;
  spec2.id = "in2";
  spec2.stdin_open = true;
  exec::Execution& e2 = w.reg->create(spec2);
  auto owned2 = std::make_unique<FakeRunner>();
  FakeRunner* r2 = owned2.get();
  r2->keep_stdin = true;
  r2->queued = 1 << 20;
  e2.start(std::move(owned2));
  rig::Rig c;
  c.host.on_head = [&e2](http::Exchange& ex) {
    ex.stream_body = true;
    ex.invite_body = true;
    ex.attach(std::make_unique<exec::StdinBody>(ex, e2, 0, false, 100));
  };
  c.start();
  c.feed("POST /command/in2/stdin HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc");
  CHECK(e2.stdin_busy());
  c.host.now += 200;
  c.conn->tick(c.host.now);
  CHECK(c.t->written.find("HTTP/1.1 503") != std::string::npos);
  CHECK(c.t->written.find("\"offset\":3") != std::string::npos);
  CHECK_FALSE(e2.stdin_busy());
  e.finish({});
  e2.finish({});
}

TEST_CASE("execution: a runner that dies mid-stream, and one that never starts") {
  World w;
  FakeRunner* runner;
  exec::Execution& e = w.start("dies", runner);
  Client c(e, ExecutionReader::Role::original);
  w.out(e, exec::kStdout, "partial");
  protocol::ExecutionResult r;
  exec::set_signal(r, SIGKILL);
  e.finish(r);
  auto ev = c.events();
  REQUIRE(!ev.empty());
  CHECK(ev.back()["signal"] == "SIGKILL");
  CHECK(ev.back()["exit_code"].is_null());
  CHECK(ev.back()["stdout_bytes"] == 7);
  // A start failure: the original stream still answers 200 with init, then the error.
  exec::ExecutionSpec spec;
  spec.id = "nostart";
  exec::Execution& never = w.reg->create(spec);
  Client c2(never, ExecutionReader::Role::original);
  never.fail_start("exec format error");
  auto ev2 = c2.events();
  REQUIRE(ev2.size() == 3);
  CHECK(ev2[0]["type"] == "init");
  CHECK(ev2[2]["start_error"] == "exec format error");
  auto status = nlohmann::json::parse(never.status_json());
  CHECK(status["exit_code"] == 255);
  CHECK(status["error"] == "exec format error");
}

TEST_CASE("execution: a record the disk refuses keeps its execution until close, and readers still work") {
  World w;
  // The records log cannot be replaced: a directory stands where it goes.
  std::string state = w.dir + "/state";
  REQUIRE(mkdir(state.c_str(), 0700) == 0);
  REQUIRE(mkdir((state + "/records.log").c_str(), 0700) == 0);
  REQUIRE(mkdir((state + "/records.log.tmp").c_str(), 0700) == 0);
  exec::RegistrySettings s;
  s.state_dir = state;
  s.retention_ms = 1;
  exec::Registry reg(&w.loop, s, *w.journal, w.activity);
  exec::ExecutionSpec spec;
  spec.id = "nopersist";
  exec::Execution& e = reg.create(spec);
  e.start(std::make_unique<FakeRunner>());
  e.output(exec::kStdout, reinterpret_cast<const uint8_t*>("x"), 1);
  e.finish({});
  // The first batch fails; its record waits for the next try, so retention
  // cannot drop an execution a restart would not know.
  w.run_until([&] { return reg.records().unsaved() > 0; });
  CHECK(reg.records().unsaved() == 1);
  CHECK(e.in_use());
  Client c(e, ExecutionReader::Role::resume);
  w.run_until([&] { return c.ended(); });
  CHECK(stdout_of(c.events(), 0) == "x");
  // At close the refused record is given up (logged) and nothing is pinned.
  reg.close();
  w.run_until([&] { return !e.in_use(); });
  CHECK_FALSE(e.in_use());
  w.run_until([&] { return !uv_loop_alive(&w.loop); });
}

TEST_CASE("execution: output the disk could not keep is a gap to a reader that needed it") {
  World w;
  // Logs under a state directory that does not exist fail their first write.
  exec::RegistrySettings s;
  s.state_dir = w.dir + "/missing";
  exec::Registry reg(&w.loop, s, *w.journal, w.activity);
  exec::ExecutionSpec spec;
  spec.id = "nodisk";
  exec::Execution& e = reg.create(spec);
  e.start(std::make_unique<FakeRunner>());
  Client live(e, ExecutionReader::Role::original);
  e.output(exec::kStdout, reinterpret_cast<const uint8_t*>("abc"), 3);
  w.run_until([&] { return e.log()->failed(); });
  e.output(exec::kStdout, reinterpret_cast<const uint8_t*>("def"), 3);
  e.finish({});
  CHECK(stdout_of(live.events(), 0) == "abcdef");  // the live stream lost nothing
  Client late(e, ExecutionReader::Role::resume);
  w.run_until([&] { return late.ended(); });
  auto ev = late.events();
  REQUIRE(ev.size() == 4);
  CHECK(ev[2]["type"] == "gap");
  CHECK(ev[2]["requested"] == 0);
  CHECK(ev[2]["available_from"] == 6);
  CHECK(ev[3]["stdout_sha256"] == protocol::sha256_hex("abcdef"));
  reg.close();
  w.run_until([&] { return !uv_loop_alive(&w.loop); });  // its last record batch
}

TEST_CASE("cold records: by id and by age, in slabs of their own that go once empty") {
  exec::ColdRecords cold;
  CHECK_FALSE(cold.oldest());
  CHECK(cold.slabs() == 0);
  std::string record(700, 'r');
  for (int i = 0; i < 300; ++i) {
    std::string id = "id-" + std::to_string(i);
    // Finish times out of order now and then: the age order still holds.
    int64_t finished = i % 50 == 7 ? 5 : 1000 + i;
    cold.put({id, 10 + i, finished, 0, static_cast<uint32_t>(i % 3), static_cast<uint8_t>(i % 4), record + id});
  }
  CHECK(cold.size() == 300);
  CHECK(cold.slabs() >= 3);  // ~220 KiB of records in 64 KiB slabs
  auto e = cold.find("id-123");
  REQUIRE(e);
  CHECK(e->id == "id-123");
  CHECK(e->started_ns == 133);
  CHECK(e->finished_ns == 1123);
  CHECK(e->last_k == 0);
  CHECK(e->flags == 3);
  CHECK(e->record == record + "id-123");
  CHECK_FALSE(cold.find("id-1234"));
  CHECK_FALSE(cold.find("id-"));  // a prefix of ids that are there
  CHECK(cold.oldest()->finished_ns == 5);
  // The same id again replaces it.
  cold.put({"id-123", 1, 2, 4, 9, 0, "short"});
  CHECK(cold.size() == 300);
  CHECK(cold.find("id-123")->record == "short");
  CHECK(cold.oldest()->id == "id-123");
  // The age order: each oldest goes, never an older one after a younger.
  int64_t last = 0;
  size_t seen = 0;
  while (auto o = cold.oldest()) {
    CHECK(o->finished_ns >= last);
    last = o->finished_ns;
    CHECK(cold.erase(std::string(o->id)));
    ++seen;
  }
  CHECK(seen == 300);
  CHECK_FALSE(cold.erase("id-5"));
  CHECK(cold.slabs() == 0);  // every slab unmapped with its last record
  // A record larger than a slab has a mapping of its own, and the slab
  // that was filling goes on filling.
  cold.put({"small-1", 0, 1, 1, 0, 0, "x"});
  std::string big(200 << 10, 'b');
  cold.put({"big", 0, 2, 1, 0, 0, big});
  cold.put({"small-2", 0, 3, 1, 0, 0, "y"});
  CHECK(cold.slabs() == 2);
  CHECK(cold.find("big")->record == big);
  CHECK(cold.find("small-2")->record == "y");
  CHECK(cold.erase("big"));
  CHECK(cold.slabs() == 1);
  size_t listed = 0;
  cold.each([&](const exec::ColdRecords::Entry& c) { listed += c.id.substr(0, 6) == "small-"; });
  CHECK(listed == 2);
}

namespace {
struct DoneRunner : FakeRunner {
  bool left = false;  // processes left behind
  bool holds_nothing() const override { return !left; }
  bool counts_processes() const override { return true; }
  void describe(nlohmann::ordered_json& status) const override { status["processes_running"] = left ? 1 : 0; }
};
}  // namespace

TEST_CASE("registry: a finished execution nobody uses goes cold and comes back the same") {
  World w;
  exec::ExecutionSpec spec;
  spec.id = "cold-1";
  spec.content = "echo cold";
  exec::Execution& e = w.reg->create(spec);
  auto runner = std::make_unique<DoneRunner>();
  DoneRunner* r = runner.get();
  e.start(std::move(runner));
  w.out(e, exec::kStdout, "out\n");
  w.out(e, exec::kStderr, "err\n");
  protocol::ExecutionResult res;
  res.exit_code = 3;
  r->left = true;
  e.finish(res);
  exec::ExecutionSpec other;
  other.id = "running-1";
  FakeRunner* running = nullptr;
  w.start("running-1", running);
  // Written, settled, unread: only the processes it left keep it warm.
  w.run_until([&] { return !e.in_use(); });
  CHECK_FALSE(e.may_go_cold());
  CHECK(w.reg->cool(0) == 0);
  r->left = false;
  std::string status = e.status_json();
  nlohmann::ordered_json summary = e.summary_json(true);
  CHECK(w.reg->cool(60000) == 0);  // not that old yet
  CHECK(w.reg->cool(0) == 1);      // the running one stays
  CHECK(w.reg->cold() == 1);
  // Listed without being warmed.
  std::vector<std::string> listed;
  w.reg->each_brief([&](const exec::Registry::Brief& b) { listed.emplace_back(b.id); });
  std::sort(listed.begin(), listed.end());
  CHECK(listed == std::vector<std::string>{"cold-1", "running-1"});
  CHECK(w.reg->summary_json("cold-1", true) == summary);
  // Its id is taken, and asking does not warm it.
  CHECK(w.reg->contains("cold-1"));
  CHECK(w.reg->contains("running-1"));
  CHECK_FALSE(w.reg->contains("cold-2"));
  CHECK(w.reg->cold() == 1);
  // find() warms it: the same status, the same output.
  exec::Execution* back = w.reg->find("cold-1");
  REQUIRE(back);
  CHECK(w.reg->cold() == 0);
  CHECK(back->status_json() == status);
  CHECK(back->summary_json(true) == summary);
  CHECK(back->done());
  CHECK_FALSE(back->reloaded());
  {
    Client c(*back, ExecutionReader::Role::resume);
    w.run_until([&] { return c.ended(); });
    CHECK(stdout_of(c.events(), 0) == "out\n");
    CHECK(c.events().back()["exit_code"] == 3);
  }
  // Read (a pool job), then free again: cold once more, its files kept.
  w.run_until([&] { return !back->in_use(); });
  CHECK(w.reg->cool(0) == 1);
  struct stat st {};
  CHECK(stat((w.dir + "/cold-1.output").c_str(), &st) == 0);
  // A restart knows it: the records log kept it through the rewrite.
  running->interrupts = 0;
  w.reg->find("running-1")->finish({});
  w.run_until([&] { return !w.reg->find("running-1")->in_use(); });
  w.reg->close();
  w.run_until([&] { return uv_loop_alive(&w.loop) == 0; });
  exec::RegistrySettings s;
  s.state_dir = w.dir;
  s.max_records = 1;
  w.reg = std::make_unique<exec::Registry>(&w.loop, s, *w.journal, w.activity);
  exec::Execution* reloaded = w.reg->find("cold-1");
  REQUIRE(reloaded);
  CHECK(reloaded->reloaded());
  // The oldest goes when more than --max-records are kept, cold or not, and
  // its files with it.
  w.run_until([&] { return w.reg->cool(0) == 2 || w.reg->cold() == 2; });
  w.run_until([&] { return !w.reg->find("cold-1"); });
  CHECK(w.reg->find("running-1"));
  w.run_until([&] { return stat((w.dir + "/cold-1.output").c_str(), &st) != 0; });
}
