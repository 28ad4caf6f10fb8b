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
  if (len == 0) return;
  stream = stream ? 1 : 0;
  if (!segs_.empty() && segs_.back().stream == stream) segs_.back().len += len;
  else {
    by_stream_[stream].push_back(segs_.size());
    segs_.push_back({end_, stored_[stream], len, stream});
  }
  end_ += len;
  stored_[stream] += len;
}

uint64_t OutputIndex::locate(int s, uint64_t off) const {
  if (off >= stored_[s]) return end_;
  const std::vector<size_t>& mine = by_stream_[s];
  // The last segment of stream s that starts at or before `off`.
  auto it = std::upper_bound(mine.begin(), mine.end(), off,
                             [this](uint64_t o, size_t i) { return o < segs_[i].stream_at; });
  const Segment& g = segs_[*(it - 1)];
  return g.at + (off - g.stream_at);
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

std::string OutputIndex::encode_entry(uint8_t stream, uint64_t len) {
  std::string e(kEntryBytes, '\0');
  e[0] = static_cast<char>(stream ? 1 : 0);
  for (int i = 0; i < 8; ++i) e[1 + i] = static_cast<char>((len >> (8 * i)) & 0xff);
  return e;
}

OutputIndex OutputIndex::decode(std::string_view bytes, uint64_t max_end) {
  OutputIndex idx;
  for (size_t p = 0; p + kEntryBytes <= bytes.size(); p += kEntryBytes) {
    uint8_t s = static_cast<uint8_t>(bytes[p]);
    if (s > 1) break;
    uint64_t len = 0;
    for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[p + 1 + i])) << (8 * i);
    if (len > max_end - idx.end_) {
      idx.add(s, max_end - idx.end_);
      break;
    }
    idx.add(s, len);
  }
  return idx;
}

ResumeStart plan_resume(uint64_t requested, uint64_t stored, uint64_t total) {
  if (requested < stored || requested >= total) return {requested, false};
  return {total, true};
}

}  // namespace execd::protocol
