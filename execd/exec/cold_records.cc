// execd/exec/cold_records: see header.
#include "execd/exec/cold_records.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>

namespace execd::exec {

// A mapping that blobs are cut from, front to back; freed space is not
// reused, the whole slab goes once its last blob does. Cold records go in
// roughly the order they finished and leave (swept) in the same order, so
// slabs empty as whole ones.
struct ColdRecords::Slab {
  size_t size;  // of the mapping
  size_t used;  // bytes cut, this header included
  size_t live;  // blobs not released
};

namespace {

constexpr size_t kAlign = alignof(std::max_align_t);

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

ColdRecords::~ColdRecords() {
  for (Slab* s : slabs_) munmap(s, s->size);
}

ColdRecords::Entry ColdRecords::view(const Blob& b) {
  Entry e;
  e.id = b.id();
  e.started_ns = b.started_ns;
  e.finished_ns = b.finished_ns;
  e.first_k = b.first_k;
  e.last_k = b.last_k;
  e.log_bytes = b.log_bytes;
  e.flags = b.flags;
  e.record = {b.id_bytes() + b.id_len, b.record_len};
  return e;
}

std::vector<ColdRecords::Blob*>::const_iterator ColdRecords::lower_bound(std::string_view id) const {
  return std::lower_bound(index_.begin(), index_.end(), id, [](const Blob* b, std::string_view v) { return b->id() < v; });
}

ColdRecords::Blob* ColdRecords::allocate(size_t bytes) {
  bytes = round_up(bytes, kAlign);
  size_t header = round_up(sizeof(Slab), kAlign);
  Slab* s = slabs_.empty() ? nullptr : slabs_.back();
  if (!s || s->size - s->used < bytes) {
    // A record larger than a slab (a long command line) gets a mapping of
    // its own, placed before the current slab so that one keeps filling.
    size_t size = std::max(kSlabBytes, round_up(header + bytes, 4096));
    void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    Slab* fresh = new (m) Slab{size, header, 0};
    if (s && size > kSlabBytes) slabs_.insert(slabs_.end() - 1, fresh);
    else slabs_.push_back(fresh);
    s = fresh;
  }
  auto* b = reinterpret_cast<Blob*>(reinterpret_cast<char*>(s) + s->used);
  s->used += bytes;
  ++s->live;
  b->slab = s;
  return b;
}

void ColdRecords::release(Blob* b) {
  Slab* s = b->slab;
  if (--s->live > 0) return;
  slabs_.erase(std::find(slabs_.begin(), slabs_.end(), s));
  munmap(s, s->size);
}

void ColdRecords::put(const Entry& e) {
  erase(e.id);
  size_t id_len = std::min<size_t>(e.id.size(), UINT16_MAX);
  Blob* b = allocate(sizeof(Blob) + id_len + e.record.size());
  b->started_ns = e.started_ns;
  b->finished_ns = e.finished_ns;
  b->first_k = e.first_k;
  b->last_k = e.last_k;
  b->log_bytes = e.log_bytes;
  b->record_len = static_cast<uint32_t>(e.record.size());
  b->id_len = static_cast<uint16_t>(id_len);
  b->flags = e.flags;
  char* bytes = reinterpret_cast<char*>(b + 1);
  std::memcpy(bytes, e.id.data(), id_len);
  std::memcpy(bytes + id_len, e.record.data(), e.record.size());
  index_.insert(lower_bound(b->id()), b);
  auto later = std::upper_bound(by_age_.begin(), by_age_.end(), b->finished_ns,
                                [](int64_t ns, const Blob* x) { return ns < x->finished_ns; });
  by_age_.insert(later, b);
}

std::optional<ColdRecords::Entry> ColdRecords::find(std::string_view id) const {
  auto it = lower_bound(id);
  if (it == index_.end() || (*it)->id() != id) return std::nullopt;
  return view(**it);
}

bool ColdRecords::erase(std::string_view id) {
  auto it = lower_bound(id);
  if (it == index_.end() || (*it)->id() != id) return false;
  Blob* b = *it;
  index_.erase(it);
  auto same_age = std::lower_bound(by_age_.begin(), by_age_.end(), b->finished_ns,
                                   [](const Blob* x, int64_t ns) { return x->finished_ns < ns; });
  by_age_.erase(std::find(same_age, by_age_.end(), b));
  release(b);
  return true;
}

std::optional<ColdRecords::Entry> ColdRecords::oldest() const {
  if (by_age_.empty()) return std::nullopt;
  return view(*by_age_.front());
}

}  // namespace execd::exec
