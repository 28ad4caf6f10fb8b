// execd/activity: see header.
#include "execd/activity.h"

#include <algorithm>

namespace execd {

void Activity::begin(const std::string& actor) {
  active_.insert(actor);
  changes_.emplace_back(++epoch_, actor);
  if (changes_.size() > kKeptChanges) changes_.pop_front();
}

void Activity::end(const std::string& actor) {
  auto it = active_.find(actor);
  if (it == active_.end()) return;
  active_.erase(it);
  changes_.emplace_back(++epoch_, actor);
  if (changes_.size() > kKeptChanges) changes_.pop_front();
}

std::vector<std::string> Activity::active_since(uint64_t epoch) const {
  std::vector<std::string> out(active_.begin(), active_.end());
  if (epoch < epoch_) {
    // Everyone who began or ended after `epoch` was active in the span.
    if (changes_.empty() || changes_.front().first > epoch + 1) out.emplace_back("?");
    for (auto it = changes_.rbegin(); it != changes_.rend() && it->first > epoch; ++it) out.push_back(it->second);
  }
  if (probe_) probe_(out);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace execd
