// execd/exec/cold_records: finished executions that nothing uses any more,
// each kept as the record the store writes (protocol/execution_record) plus
// what finding its retained output again takes, until the registry warms it
// (exec/registry: a request asks for it) or sweeps it.
//
// Why not the Execution itself: a finished one is ~2.5 KiB in ~19 heap
// allocations (the execution, its log, its result, digests, ids, paths),
// made while its command ran, among that command's transient allocations.
// After a burst of commands the kept ones pin the heap pages around them,
// so free memory cannot go back to the system (500 commands kept ~3.6 MiB
// resident). A cold record is one string (the registry packs it: see
// protocol/packed_record) in slabs mapped for cold records alone (kSlabBytes
// each, unmapped once empty), and the index is two vectors.
//
// Loop thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace execd::exec {

class ColdRecords {
 public:
  static constexpr size_t kSlabBytes = 64 << 10;

  struct Entry {
    std::string_view id;
    int64_t started_ns = 0, finished_ns = 0;
    // The retained output's segments, first to last (`<id>.output[.<k>]`);
    // none when first > last.
    uint32_t first_k = 1, last_k = 0;
    uint8_t flags = 0;        // the registry's
    std::string_view record;  // the registry's (a packed protocol::StoredExecution)
    // What the state budget counts for those segments (exec/state_budget).
    uint64_t log_bytes = 0;
  };

  ColdRecords() = default;
  ~ColdRecords();
  ColdRecords(const ColdRecords&) = delete;
  ColdRecords& operator=(const ColdRecords&) = delete;

  // Keeps `e` (its strings are copied, and must not be views into this
  // store), in place of any entry of its id.
  void put(const Entry& e);
  // Views into the slabs: valid until the next put or erase.
  std::optional<Entry> find(std::string_view id) const;
  bool erase(std::string_view id);
  size_t size() const { return index_.size(); }
  // The entry that finished first (none when empty).
  std::optional<Entry> oldest() const;
  // Every entry, in id order. `fn` must not put or erase.
  template <class Fn>
  void each(Fn fn) const {
    for (const Blob* b : index_) fn(view(*b));
  }
  // Slabs mapped now (for tests and the memory figures).
  size_t slabs() const { return slabs_.size(); }

 private:
  struct Slab;
  struct Blob {
    Slab* slab;
    int64_t started_ns, finished_ns;
    uint64_t log_bytes;
    uint32_t first_k, last_k;
    uint32_t record_len;
    uint16_t id_len;
    uint8_t flags;
    // then the id's bytes, then the record's
    const char* id_bytes() const { return reinterpret_cast<const char*>(this + 1); }
    std::string_view id() const { return {id_bytes(), id_len}; }
  };
  static Entry view(const Blob& b);
  // Where `id` is in index_ (or would go).
  std::vector<Blob*>::const_iterator lower_bound(std::string_view id) const;
  Blob* allocate(size_t bytes);
  void release(Blob* b);

  std::vector<Blob*> index_;   // sorted by id
  std::vector<Blob*> by_age_;  // sorted by finished_ns (mostly appended)
  std::vector<Slab*> slabs_;  // the last one takes new blobs
};

}  // namespace execd::exec
