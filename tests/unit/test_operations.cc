// Unit tests for the records of caller-bound creation (execd/exec/operations):
// what the integration tests cannot reach in a test's time, the 24 h expiry
// and what a full store may drop; and the identity checks at their edges
// (protocol/operations).
#include <doctest/doctest.h>

#include <string>
#include <variant>

#include "execd/exec/operations.h"
#include "protocol/operations.h"

using execd::exec::OperationKind;
using execd::exec::OperationState;
using execd::exec::OperationStore;
using Outcome = OperationStore::Outcome;

TEST_CASE("operations: one owner per key; conflict on another fingerprint; kinds and principals apart") {
  OperationStore s(8);
  CHECK(s.instance_id().size() == 32);
  auto a = s.claim("p", OperationKind::command, "id1", 1000, "f", 10);
  REQUIRE(a.outcome == Outcome::owner);
  CHECK(a.op->state == OperationState::creating);
  std::string handle = a.op->id;
  auto again = s.claim("p", OperationKind::command, "id1", 1000, "f", 11);
  CHECK(again.outcome == Outcome::existing);
  CHECK(again.op->id == handle);
  CHECK(s.claim("p", OperationKind::command, "id1", 1000, "g", 11).outcome == Outcome::conflict);
  CHECK(s.claim("p", OperationKind::pty, "id1", 1000, "f", 11).outcome == Outcome::owner);
  CHECK(s.claim("q", OperationKind::command, "id1", 1000, "f", 11).outcome == Outcome::owner);
  CHECK(s.find("q", OperationKind::command, "id1", 11)->id != handle);
  s.finish(handle, true);
  s.finish(handle, false);  // once only
  CHECK(s.find("p", OperationKind::command, "id1", 12)->state == OperationState::created);
  s.finish("no-such-id", true);
}

TEST_CASE("operations: expiry, and what a full store can drop") {
  OperationStore s(2);
  bool releasable = false;
  int asked = 0;
  s.set_releasable([&](const execd::exec::Operation&) {
    ++asked;
    return releasable;
  });
  CHECK(s.claim("p", OperationKind::command, "old", 100, "f", 50).outcome == Outcome::owner);
  CHECK(s.claim("p", OperationKind::command, "late", 100, "f", 100).outcome == Outcome::expired);
  auto b = s.claim("p", OperationKind::command, "b", 500, "f", 60);
  REQUIRE(b.outcome == Outcome::owner);
  // Full; "old" is past its end but still creating: never dropped.
  CHECK(s.claim("p", OperationKind::command, "c", 500, "f", 200).outcome == Outcome::full);
  CHECK(asked == 0);
  s.finish(s.find("p", OperationKind::command, "old", 60)->id, true);
  // Over, but its run is not: kept.
  CHECK(s.claim("p", OperationKind::command, "c", 500, "f", 200).outcome == Outcome::full);
  CHECK(asked > 0);
  CHECK(s.find("p", OperationKind::command, "old", 200) != nullptr);
  releasable = true;
  CHECK(s.claim("p", OperationKind::command, "c", 500, "f", 200).outcome == Outcome::owner);
  CHECK(s.size() == 2);
  CHECK(s.find("p", OperationKind::command, "old", 200) == nullptr);
  // A lookup drops an expired record of its own key.
  s.finish(b.op->id, false);
  CHECK(s.find("p", OperationKind::command, "b", 499) != nullptr);
  CHECK(s.find("p", OperationKind::command, "b", 500) == nullptr);
  CHECK(s.size() == 1);
}

TEST_CASE("operations: identity checks") {
  using execd::protocol::ApiError;
  using execd::protocol::check_operation_identity;
  const std::string inst(32, 'a');
  auto status = [&](const std::string& id, int64_t now = 1000) {
    auto r = check_operation_identity(id, inst, now);
    return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r).status : 0;
  };
  CHECK(std::get<int64_t>(check_operation_identity(inst + ".1000.abcdefgh", inst, 1000)) == 1000);
  CHECK(std::get<int64_t>(check_operation_identity(inst + ".0.abcdefgh", inst, 1000)) == 0);
  CHECK(status(inst + ".9223372036854775807.abcdefgh") == 400);  // future
  CHECK(status(inst + ".9223372036854775808.abcdefgh") == 400);  // past int64
  CHECK(status(std::string(32, 'b') + ".5.abcdefgh") == 409);
  CHECK(status(std::string(32, 'b') + ".05.abcdefgh") == 400);  // the timestamp is checked first
  CHECK(status(inst + ".5." + std::string(128, 'x')) == 0);
  CHECK(status(inst + ".5." + std::string(129, 'x')) == 400);
  CHECK(status(inst + ".5.abcdefg") == 400);
  CHECK(status(inst + ".5.abcdefgh.") == 400);
  CHECK(status("." + inst + ".5.abcdefgh") == 400);
}

TEST_CASE("operations: keyed bodies") {
  using namespace execd::protocol;
  auto err = [](const std::string& body) {
    auto r = decode_keyed_command(body);
    return std::holds_alternative<DecodeError>(r) ? std::get<DecodeError>(r).message : std::string();
  };
  CHECK(err(R"({"operation_id":"x","command":"true","envs":{"A":"1"},"stdin":true})") == "");
  CHECK(err(R"({"operation_id":"x","command":"true"} )") == "");
  CHECK(err(R"({"operation_id":"x","command":"a\"}"} [)") == "unexpected trailing creation data");
  CHECK(err(R"({"operation_id":"x","command":"{["})") == "");
  CHECK(err(R"("\"")") == "invalid creation JSON");
  CHECK(err(R"({"operation_id":"x","command":"true","limits":{"pids":0}})") == "invalid command request");
  auto pty = decode_keyed_pty(R"({"operation_id":"x","cwd":null,"command":"top"})");
  REQUIRE(std::holds_alternative<KeyedPty>(pty));
  CHECK(std::get<KeyedPty>(pty).request.command == "top");
  CHECK(pty_fingerprint({"", "top"}) != pty_fingerprint({"top", ""}));
}
