// Unit tests for protocol/packed_record: cold records packed against a
// dictionary, and what unpacking makes of anything else.
#include <doctest/doctest.h>

#include <random>
#include <string>

#include "protocol/execution_record.h"
#include "protocol/packed_record.h"

using namespace execd::protocol;

namespace {
std::string record_of(const std::string& id, const std::string& content) {
  StoredExecution r;
  r.id = id;
  r.content = content;
  r.fingerprint = std::string(64, 'f');
  r.boot_id = "6b57e06c-11c4-495a-9342-44b8649b6066";
  r.finished = true;
  r.started_ns = 1796527329260698725;
  r.finished_ns = 1796527329775913444;
  r.result.exit_code = 0;
  r.result.stdout_sha256 = "d117fa006ba9208500b2930ce69cbde436c647afa917cb7396a9bc9111a46dd2";
  r.result.stderr_sha256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
  return encode_stored_execution(r);
}
}  // namespace

TEST_CASE("packed record: a record against a record of the same boot is ~5x smaller, and comes back whole") {
  RecordPacker packer(record_of(std::string(32, '0'), "true"));
  std::string rec = record_of("123ccaa4c07944649ac6940a2b736f98", "sleep 0.5; echo done");
  std::string packed = packer.pack(rec);
  CAPTURE(rec.size());
  CAPTURE(packed.size());
  CHECK(packed.size() * 4 < rec.size());
  auto back = packer.unpack(packed);
  REQUIRE(back);
  CHECK(*back == rec);
  CHECK(decode_stored_execution(*back)->content == "sleep 0.5; echo done");
  // Large and incompressible ones too (the latter kept as they are).
  std::mt19937 rng(7);
  std::string noise(300000, '\0');
  for (char& c : noise) c = static_cast<char>(rng());
  for (const std::string& r : {record_of("big", std::string(2 << 20, 'x')), noise, std::string()}) {
    auto b = packer.unpack(packer.pack(r));
    REQUIRE(b);
    CHECK(*b == r);
  }
  CHECK(packer.pack(noise).size() == noise.size() + 1);
}

TEST_CASE("packed record: cut, flipped or foreign input never unpacks to another record") {
  RecordPacker packer(record_of(std::string(32, '0'), "true"));
  std::string rec = record_of("abc", "echo hi");
  std::string packed = packer.pack(rec);
  CHECK_FALSE(packer.unpack(""));
  CHECK_FALSE(packer.unpack(std::string(1, '\2') + "x"));
  for (size_t n = 0; n < packed.size(); ++n) {
    auto b = packer.unpack(packed.substr(0, n));
    CHECK((!b || *b != rec));
  }
  for (size_t i = 1; i < packed.size(); ++i) {
    std::string bad = packed;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    auto b = packer.unpack(bad);
    // A flipped bit may still inflate: to the record itself (bits past the
    // last block's end are not read), or to text whose checksum fails.
    CHECK((!b || *b == rec || !decode_stored_execution(*b)));
  }
  RecordPacker other(record_of(std::string(32, '1'), "false"));
  auto b = other.unpack(packed);
  CHECK((!b || !decode_stored_execution(*b)));
}
