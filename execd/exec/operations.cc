// execd/exec/operations: see header.
#include "execd/exec/operations.h"

#include "execd/ids.h"

namespace execd::exec {

std::string_view operation_kind_name(OperationKind k) { return k == OperationKind::command ? "command" : "pty"; }

std::string_view operation_state_name(OperationState s) {
  switch (s) {
    case OperationState::creating:
      return "creating";
    case OperationState::created:
      return "created";
    case OperationState::failed:
      return "failed";
  }
  return "failed";
}

OperationStore::OperationStore(size_t capacity) : instance_id_(random_id32()), capacity_(capacity ? capacity : 1) {}

std::string OperationStore::key(std::string_view principal, OperationKind kind, std::string_view identity) {
  std::string k;
  k.reserve(principal.size() + identity.size() + 3);
  k.append(principal);
  k += '\n';
  k += kind == OperationKind::command ? 'c' : 'p';
  k += '\n';
  k.append(identity);
  return k;
}

bool OperationStore::removable(const Operation& op, int64_t now) const {
  if (op.state == OperationState::creating || now < op.expires_at) return false;
  return !releasable_ || releasable_(op);
}

Operation* OperationStore::find(std::string_view principal, OperationKind kind, std::string_view identity,
                                int64_t now) {
  auto it = records_.find(key(principal, kind, identity));
  if (it == records_.end()) return nullptr;
  if (removable(it->second, now)) {
    keys_.erase(it->second.id);
    records_.erase(it);
    return nullptr;
  }
  return &it->second;
}

OperationStore::Claim OperationStore::claim(std::string_view principal, OperationKind kind, std::string_view identity,
                                            int64_t expires_at, std::string_view fingerprint, int64_t now) {
  if (Operation* op = find(principal, kind, identity, now)) {
    if (op->fingerprint != fingerprint) return {Outcome::conflict};
    return {Outcome::existing, op};
  }
  if (now >= expires_at) return {Outcome::expired};
  if (records_.size() >= capacity_ && sweep(now) == 0) return {Outcome::full};
  std::string id = random_id32();
  while (keys_.count(id)) id = random_id32();
  std::string k = key(principal, kind, identity);
  Operation& op = records_[k];
  op.id = id;
  op.kind = kind;
  op.state = OperationState::creating;
  op.expires_at = expires_at;
  op.fingerprint.assign(fingerprint);
  keys_[id] = std::move(k);
  return {Outcome::owner, &op};
}

void OperationStore::finish(const std::string& id, bool created) {
  auto k = keys_.find(id);
  if (k == keys_.end()) return;
  auto it = records_.find(k->second);
  if (it == records_.end() || it->second.state != OperationState::creating) return;
  it->second.state = created ? OperationState::created : OperationState::failed;
}

size_t OperationStore::sweep(int64_t now) {
  size_t gone = 0;
  for (auto it = records_.begin(); it != records_.end();) {
    if (removable(it->second, now)) {
      keys_.erase(it->second.id);
      it = records_.erase(it);
      ++gone;
    } else {
      ++it;
    }
  }
  return gone;
}

}  // namespace execd::exec
