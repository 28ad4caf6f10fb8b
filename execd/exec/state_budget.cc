// execd/exec/state_budget: see header.
#include "execd/exec/state_budget.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <uv.h>

#include <algorithm>

namespace execd::exec {

namespace {

// Bytes a file takes on disk (its blocks; a sparse or preallocated file is
// what it occupies, not its length).
uint64_t file_disk_bytes(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

uint64_t apply_delta(uint64_t v, int64_t delta) {
  if (delta < 0 && static_cast<uint64_t>(-delta) > v) return 0;
  return static_cast<uint64_t>(static_cast<int64_t>(v) + delta);
}

}  // namespace

StateBudget::StateBudget(Settings s) : s_(std::move(s)) { refresh(true); }

void StateBudget::add_output(int64_t delta) { output_ = apply_delta(output_, delta); }

void StateBudget::add_spool(int64_t delta) { spool_ = apply_delta(spool_, delta); }

void StateBudget::refresh(bool force) {
  uint64_t now_ms = uv_hrtime() / 1000000;
  if (!force && now_ms - refreshed_ms_ < kRefreshMs) return;
  refreshed_ms_ = now_ms;
  records_ = file_disk_bytes(s_.dir + "/records.log");
  journal_ = file_disk_bytes(s_.dir + "/journal.jsonl") + file_disk_bytes(s_.dir + "/journal.1.jsonl");
  struct statvfs vfs {};
  if (::statvfs(s_.dir.c_str(), &vfs) == 0) {
    fs_total_ = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
    fs_avail_ = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  }
  uint64_t limit = s_.cap_bytes ? s_.cap_bytes : UINT64_MAX;
  if (fs_total_ > 0) {
    limit = std::min(limit, fs_total_ / 100 * s_.share_percent);
    // What execd keeps plus what is free above the floor: the user's files
    // grow into the same space, and the floor stays free whoever wrote.
    uint64_t floor = fs_total_ / 100 * s_.floor_percent;
    uint64_t reachable = used() + (fs_avail_ > floor ? fs_avail_ - floor : 0);
    limit = std::min(limit, reachable);
  }
  limit_ = limit;
}

uint64_t StateBudget::output_limit() const {
  uint64_t journal_reserve = std::min(2 * s_.journal_max_bytes, limit_ / kJournalShare);
  uint64_t kept_aside = std::max(journal_reserve, journal_) + records_ + spool_;
  return limit_ > kept_aside ? limit_ - kept_aside : 0;
}

uint64_t StateBudget::segment_bytes(uint64_t log_limit) const {
  uint64_t quarter = std::max<uint64_t>(log_limit / 4, 1);
  uint64_t share = std::max<uint64_t>(output_limit() / kSegmentShare, 64 << 10);
  return std::min(quarter, share);
}

void StateBudget::need(uint64_t more) {
  if (making_room_ || !make_room) return;
  refresh();
  uint64_t allowed = output_limit();
  if (output_ + more <= allowed) return;
  making_room_ = true;
  make_room(output_ + more - allowed);
  making_room_ = false;
}

}  // namespace execd::exec
