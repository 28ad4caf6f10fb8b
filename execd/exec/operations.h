// execd/exec/operations: the records of caller-bound creation (OpenSandbox
// PR 1771's operations API). Owns, for this execd process, its instance id
// and at most `capacity` records, each keyed by (principal, kind, identity)
// and naming the command id or PTY session id execd reserved for it, with
// the creation's fingerprint, its expiry and its state, which moves once:
// creating -> created | failed. The runs themselves are the registry's and
// the PTY registry's; a record only says which one an identity made.
//
// Removal is lazy: a record past its expiry whose creation is over and
// whose run `releasable` says may go is dropped when its key is looked up
// or claimed, and all such records when a claim finds the store full. The
// identity itself says it has expired, so nothing is kept for a dropped
// record. Loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace execd::exec {

enum class OperationKind { command, pty };
enum class OperationState { creating, created, failed };

std::string_view operation_kind_name(OperationKind k);
std::string_view operation_state_name(OperationState s);

struct Operation {
  std::string id;  // the command id / PTY session id (32 hex)
  OperationKind kind = OperationKind::command;
  OperationState state = OperationState::creating;
  int64_t expires_at = 0;  // Unix seconds: issued_at + retention
  std::string fingerprint;
};

class OperationStore {
 public:
  // May the run behind an expired, finished record go (with the record)?
  // A PTY's is deleted by the callback when it says yes.
  using Releasable = std::function<bool(const Operation&)>;

  explicit OperationStore(size_t capacity);

  const std::string& instance_id() const { return instance_id_; }
  size_t capacity() const { return capacity_; }
  size_t size() const { return records_.size(); }
  void set_releasable(Releasable r) { releasable_ = std::move(r); }

  enum class Outcome { owner, existing, conflict, expired, full };
  struct Claim {
    Outcome outcome;
    Operation* op = nullptr;  // owner and existing
  };
  // The claim of `identity` (already checked; `expires_at` its end) by
  // `principal` (a digest) for a creation fingerprinted `fingerprint`, at
  // `now` (Unix seconds). An owner gets a new record in `creating` under a
  // fresh id and must finish() it.
  Claim claim(std::string_view principal, OperationKind kind, std::string_view identity, int64_t expires_at,
              std::string_view fingerprint, int64_t now);
  // The record, if it is still kept.
  Operation* find(std::string_view principal, OperationKind kind, std::string_view identity, int64_t now);
  // creating -> created or failed, once; later calls change nothing. By
  // the record's id: the record may have gone meanwhile.
  void finish(const std::string& id, bool created);

 private:
  static std::string key(std::string_view principal, OperationKind kind, std::string_view identity);
  bool removable(const Operation& op, int64_t now) const;
  // Drops every removable record; how many went.
  size_t sweep(int64_t now);

  std::string instance_id_;
  size_t capacity_;
  Releasable releasable_;
  std::unordered_map<std::string, Operation> records_;  // by key()
  std::unordered_map<std::string, std::string> keys_;   // operation id -> key
};

}  // namespace execd::exec
