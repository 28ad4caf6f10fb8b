// GET /journal?follow=true on a real loop and a fake connection: a follower
// gets every entry after `since`, in order, whenever it is written.
#include <doctest/doctest.h>
#include <uv.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "execd/api/journal.h"
#include "execd/journal/journal.h"
#include "execd/work_gate.h"
#include "execd/context.h"
#include "execd/routes.h"
#include "http_rig.h"
#include "loop_scratch.h"

using namespace execd;

namespace {

// The seqs of the entry lines in a chunked body, "2 3" (chunk sizes and
// the empty keep-alive lines are not JSON objects).
std::string seqs_in(const std::string& written) {
  std::string out;
  std::istringstream lines(written.substr(written.find("\r\n\r\n") + 4));
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;
    out += (out.empty() ? "" : " ") + std::to_string(nlohmann::json::parse(line)["seq"].get<uint64_t>());
  }
  return out;
}

nlohmann::ordered_json command(const std::string& id) { return {{"type", "command"}, {"id", id}}; }

}  // namespace

TEST_CASE("journal follow: an entry written while the catch-up is on the pool is not skipped") {
  LoopScratch s;
  Context ctx;
  ctx.loop = &s.loop;
  ctx.config.state_dir = s.dir;
  WorkGate gate{4};
  {
    journal::Journal journal(ctx, gate);
    Config open;
    open.insecure_no_auth = true;
    Access access(open);
    RouteTable routes(access, Listener::execd);
    api::add_journal_routes(routes, journal);
    journal.append(command("a"));
    REQUIRE(journal.head().seq == 1);

    rig::Rig r;
    r.host.on_head = [&](http::Exchange& ex) { routes.route(ex); };
    r.start();
    r.feed("GET /journal?since=1&follow=true HTTP/1.1\r\nHost: t\r\n\r\n");
    // The reader's catch-up (nothing after 1 yet) is queued; entry 2 is
    // written before it comes back.
    journal.append(command("b"));
    s.run_until([&] { return !seqs_in(r.t->written).empty(); });
    CHECK(seqs_in(r.t->written) == "2");
    // And live from there.
    journal.append(command("c"));
    CHECK(seqs_in(r.t->written) == "2 3");

    r.conn->on_transport_closed();
    r.host.run_safe_point();
  }
  unlink((s.dir + "/journal.jsonl").c_str());
}
