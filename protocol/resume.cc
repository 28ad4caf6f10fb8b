// protocol/resume: see header.
#include "protocol/resume.h"

#include <algorithm>

namespace execd::protocol {

bool valid_client_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-';
    if (!ok) return false;
  }
  return true;
}

std::optional<uint64_t> parse_offset(std::string_view raw) {
  if (raw.empty() || raw.size() > 20) return std::nullopt;
  uint64_t v = 0;
  for (char c : raw) {
    if (c < '0' || c > '9') return std::nullopt;
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

StdinWritePlan plan_stdin_write(uint64_t accepted, std::optional<uint64_t> offset) {
  StdinWritePlan p;
  if (!offset) return p;
  if (*offset > accepted) p.gap = true;
  else p.skip = accepted - *offset;
  return p;
}

void OutputIndex::add(uint8_t stream, uint64_t len) {
  if (len == 0 || stream >= kChannels) return;
  if (!segs_.empty() && segs_.back().stream == stream) segs_.back().len += len;
  else segs_.push_back({end_, stored_[stream], len, stream});
  end_ += len;
  stored_[stream] += len;
}

OutputIndex::Position OutputIndex::position() const {
  Position p;
  p.at = end_;
  for (int s = 0; s < kChannels; ++s) p.stream_at[s] = stored_[s];
  return p;
}

uint64_t OutputIndex::locate(int s, uint64_t off) const {
  if (off >= stored_[s]) return end_;
  if (off < first_.stream_at[s]) return first_.at;
  // The last segment of channel s that starts at or before `off`: a walk
  // from the back, where readers resume (the list holds a few runs per
  // retained stretch of interleaved output).
  for (auto it = segs_.rbegin(); it != segs_.rend(); ++it)
    if (it->stream == s && it->stream_at <= off) return it->at + (off - it->stream_at);
  return first_.at;
}

OutputIndex::Position OutputIndex::position_at(uint64_t at) const {
  Position p = first_;
  if (at <= first_.at) return p;
  if (at >= end_) return position();
  auto it = std::upper_bound(segs_.begin(), segs_.end(), at, [](uint64_t o, const Segment& g) { return o < g.at; });
  // Every channel's offset just after the last run of it before `at`.
  p.at = at;
  bool seen[kChannels] = {};
  for (auto r = std::make_reverse_iterator(it); r != segs_.rend(); ++r) {
    if (seen[r->stream]) continue;
    seen[r->stream] = true;
    p.stream_at[r->stream] = r->stream_at + std::min(r->len, at - r->at);
  }
  return p;
}

std::vector<OutputIndex::Segment> OutputIndex::pieces(uint64_t from, uint64_t to) const {
  std::vector<Segment> out;
  if (from >= to) return out;
  auto it = std::upper_bound(segs_.begin(), segs_.end(), from, [](uint64_t o, const Segment& g) { return o < g.at; });
  if (it != segs_.begin()) --it;
  for (; it != segs_.end() && it->at < to; ++it) {
    uint64_t a = std::max(from, it->at), b = std::min(to, it->at + it->len);
    if (a >= b) continue;
    out.push_back({a, it->stream_at + (a - it->at), b - a, it->stream});
  }
  return out;
}

void OutputIndex::drop_before(uint64_t at) {
  if (at <= first_.at) return;
  if (at > end_) at = end_;
  first_ = position_at(at);
  auto keep = std::find_if(segs_.begin(), segs_.end(), [at](const Segment& g) { return g.at + g.len > at; });
  segs_.erase(segs_.begin(), keep);
  if (!segs_.empty() && segs_.front().at < at) {
    Segment& g = segs_.front();
    uint64_t cut = at - g.at;
    g.at += cut;
    g.stream_at += cut;
    g.len -= cut;
  }
}

void OutputIndex::truncate(uint64_t at) {
  if (at >= end_) return;
  if (at < first_.at) at = first_.at;
  Position p = position_at(at);
  while (!segs_.empty() && segs_.back().at >= at) segs_.pop_back();
  if (!segs_.empty() && segs_.back().at + segs_.back().len > at) segs_.back().len = at - segs_.back().at;
  end_ = at;
  for (int s = 0; s < kChannels; ++s) stored_[s] = p.stream_at[s];
}

namespace {
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}
uint64_t get_u64(std::string_view b, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(b[at + i])) << (8 * i);
  return v;
}
}  // namespace

std::string OutputIndex::encode_entry(uint8_t stream, uint64_t len) {
  std::string e;
  e.reserve(kEntryBytes);
  e += static_cast<char>(stream);
  put_u64(e, len);
  return e;
}

std::string OutputIndex::encode_header(const Position& start) {
  std::string h;
  h.reserve(kHeaderBytes);
  h += static_cast<char>(0xFE);
  put_u64(h, start.at);
  for (int s = 0; s < kChannels; ++s) put_u64(h, start.stream_at[s]);
  return h;
}

bool OutputIndex::decode_segment(std::string_view bytes, uint64_t max_len) {
  Position start;  // an old file without a header starts at 0
  size_t p = 0;
  if (!bytes.empty() && static_cast<uint8_t>(bytes[0]) == 0xFE) {
    if (bytes.size() < kHeaderBytes) return false;
    start.at = get_u64(bytes, 1);
    for (int s = 0; s < kChannels; ++s) start.stream_at[s] = get_u64(bytes, 9 + 8 * s);
    p = kHeaderBytes;
  }
  if (!started_) {
    started_ = true;
    first_ = start;
    end_ = start.at;
    for (int s = 0; s < kChannels; ++s) stored_[s] = start.stream_at[s];
  } else if (start.at != end_) {
    return false;
  }
  uint64_t limit_end = end_ + max_len;
  for (; p + kEntryBytes <= bytes.size(); p += kEntryBytes) {
    uint8_t s = static_cast<uint8_t>(bytes[p]);
    if (s >= kChannels) break;
    uint64_t len = get_u64(bytes, p + 1);
    if (len > limit_end - end_) {
      add(s, limit_end - end_);
      break;
    }
    add(s, len);
  }
  return true;
}

OutputIndex OutputIndex::decode(std::string_view bytes, uint64_t max_end) {
  OutputIndex idx;
  idx.decode_segment(bytes, max_end);
  return idx;
}

ResumeStart plan_resume(uint64_t requested, uint64_t first, uint64_t stored, uint64_t total) {
  if (requested < first) return {first < stored ? first : total, true};
  if (requested < stored || requested >= total) return {requested, false};
  return {total, true};
}

}  // namespace execd::protocol
