// execd/activity: see header.
#include "execd/activity.h"

#include <algorithm>

namespace execd {

void Activity::begin(const std::string& actor) {
  active_.insert(actor);
  record(actor);
}

void Activity::end(const std::string& actor) {
  auto it = active_.find(actor);
  if (it == active_.end()) return;
  active_.erase(it);
  record(actor);
}

void Activity::drop_oldest() {
  first_ = (first_ + 1) % kKeptChanges;
  --count_;
}

void Activity::record(const std::string& actor) {
  ++epoch_;
  if (count_ == kKeptChanges) drop_oldest();
  size_t len = std::min(actor.size(), kMaxName);
  // The names are a FIFO byte ring: the oldest change's name starts the
  // used span, the next name goes at names_head_ (or at 0 when it does not
  // fit before the end). Oldest changes go until the name fits. A wrapped
  // span never fills completely (strict comparisons below), so head ==
  // tail means no bytes are in use.
  size_t at = names_head_;
  while (count_ > 0) {
    size_t tail = changes_[first_].at;
    if (names_head_ >= tail) {
      if (kNameBytes - names_head_ >= len) break;
      if (tail > len) {
        at = 0;
        break;
      }
    } else if (tail - names_head_ > len) {
      break;
    }
    drop_oldest();
  }
  if (count_ == 0) at = 0;
  std::copy_n(actor.data(), len, names_.get() + at);
  changes_[(first_ + count_) % kKeptChanges] = Change{epoch_, static_cast<uint32_t>(at), static_cast<uint32_t>(len)};
  ++count_;
  names_head_ = at + len;
}

std::vector<std::string> Activity::active_since(uint64_t epoch) const {
  std::vector<std::string> out(active_.begin(), active_.end());
  if (epoch < epoch_) {
    // Everyone who began or ended after `epoch` was active in the span.
    if (count_ == 0 || changes_[first_].epoch > epoch + 1) out.emplace_back("?");
    for (size_t i = count_; i > 0; --i) {
      const Change& c = changes_[(first_ + i - 1) % kKeptChanges];
      if (c.epoch <= epoch) break;
      out.emplace_back(name(c));
    }
  }
  if (probe_) probe_(out);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace execd
