// protocol/changes: see header.
#include "protocol/changes.h"

#include <cstdio>
#include <cstdlib>
#include <optional>

#include <simdjson.h>

namespace execd::protocol {

const char* change_op_name(ChangeOp op) {
  switch (op) {
    case ChangeOp::created: return "created";
    case ChangeOp::modified: return "modified";
    case ChangeOp::removed: return "removed";
    case ChangeOp::renamed: return "renamed";
  }
  return "modified";
}

namespace {
constexpr size_t kMaxCounted = 1000000;
}  // namespace

ChangeSet::Rec* ChangeSet::find(const std::string& path) {
  auto it = recs_.find(path);
  return it == recs_.end() ? nullptr : &it->second;
}

ChangeSet::Rec* ChangeSet::make(const std::string& path) {
  if (recs_.size() >= max_) {
    if (dropped_.size() < kMaxCounted) dropped_.insert(std::hash<std::string>{}(path));
    return nullptr;
  }
  return &recs_[path];
}

void ChangeSet::add(const WatchEvent& e, bool concurrent) {
  switch (e.kind) {
    case WatchKind::create: return on_create(e, concurrent);
    case WatchKind::write:
    case WatchKind::chmod: return on_touch(e, concurrent);
    case WatchKind::remove: return on_remove(e, concurrent);
    case WatchKind::rename: return on_rename(e, concurrent);
    case WatchKind::gap: overflow_ = true; return;
    case WatchKind::gone:
      if (error_.empty()) error_ = "the watched root " + e.path + " went away (" + e.reason + ")";
      return;
  }
}

void ChangeSet::on_create(const WatchEvent& e, bool concurrent) {
  Rec* r = find(e.path);
  if (!r) {
    r = make(e.path);
    if (!r) return;
    r->op = ChangeOp::created;
  } else if (r->op == ChangeOp::removed) {
    r->op = ChangeOp::modified;  // removed, then made again: replaced
  } else {
    r->content = true;
  }
  r->entry = e.entry;
  r->concurrent = r->concurrent || concurrent;
}

void ChangeSet::on_touch(const WatchEvent& e, bool concurrent) {
  Rec* r = find(e.path);
  if (!r) {
    r = make(e.path);
    if (!r) return;
    r->op = ChangeOp::modified;
    r->entry = e.entry;
  } else if (r->op == ChangeOp::removed) {
    r->op = ChangeOp::modified;
  } else if (r->op == ChangeOp::renamed) {
    r->content = true;
  }
  r->concurrent = r->concurrent || concurrent;
}

void ChangeSet::on_remove(const WatchEvent& e, bool concurrent) {
  Rec* r = find(e.path);
  if (!r) {
    r = make(e.path);
    if (!r) return;
    r->op = ChangeOp::removed;
    r->entry = e.entry;
    r->concurrent = concurrent;
    return;
  }
  bool was_concurrent = r->concurrent || concurrent;
  switch (r->op) {
    case ChangeOp::created:
      recs_.erase(e.path);  // made and gone within the run: nothing to report
      return;
    case ChangeOp::modified:
    case ChangeOp::removed:
      r->op = ChangeOp::removed;
      r->concurrent = was_concurrent;
      return;
    case ChangeOp::renamed: {
      // What is gone is the entry that had `from` before the run.
      std::string from = r->from;
      EntryType entry = r->entry;
      recs_.erase(e.path);
      Rec* o = find(from);
      if (!o) {
        o = make(from);
        if (!o) return;
        o->op = ChangeOp::removed;
      } else if (o->op == ChangeOp::created) {
        o->op = ChangeOp::modified;  // a new one took the old name: replaced
      }
      o->entry = entry;
      o->concurrent = o->concurrent || was_concurrent;
      return;
    }
  }
}

void ChangeSet::on_rename(const WatchEvent& e, bool concurrent) {
  const std::string& q = e.from;
  const std::string& p = e.path;
  if (q == p) return;
  // The entries below a renamed directory move with it.
  std::string qdir = q + "/";
  std::vector<std::pair<std::string, Rec>> moved;
  for (auto it = recs_.lower_bound(qdir); it != recs_.end() && it->first.compare(0, qdir.size(), qdir) == 0;) {
    moved.emplace_back(p + it->first.substr(q.size()), std::move(it->second));
    it = recs_.erase(it);
  }
  for (auto& [path, rec] : moved) recs_[path] = std::move(rec);

  std::optional<Rec> old;
  if (auto it = recs_.find(q); it != recs_.end()) {
    old = std::move(it->second);
    recs_.erase(it);
  }
  Rec* target = find(p);
  bool replaced = target && target->op == ChangeOp::removed;
  Rec next;
  next.entry = e.entry;
  next.concurrent = concurrent || (old && old->concurrent) || (target && target->concurrent);
  if (!old) {
    next.op = ChangeOp::renamed;
    next.from = q;
  } else if (old->op == ChangeOp::created) {
    next.op = ChangeOp::created;
  } else if (old->op == ChangeOp::renamed) {
    if (old->from == p) {
      // Back where it was before the run.
      if (!old->content) {
        if (target) recs_.erase(p);
        return;
      }
      next.op = ChangeOp::modified;
    } else {
      next.op = ChangeOp::renamed;
      next.from = old->from;
      next.content = old->content;
    }
  } else {
    // modified (or an odd removed): it moved, and its content changed.
    next.op = ChangeOp::renamed;
    next.from = q;
    next.content = true;
  }
  if (replaced && next.op == ChangeOp::created) next.op = ChangeOp::modified;
  if (target) {
    *target = std::move(next);
    return;
  }
  if (Rec* r = make(p)) *r = std::move(next);
}

std::vector<ChangeEntry> ChangeSet::take() {
  std::vector<ChangeEntry> out;
  out.reserve(recs_.size());
  for (auto& [path, r] : recs_) {
    ChangeEntry c;
    c.path = path;
    c.op = r.op;
    c.from = std::move(r.from);
    c.content_changed = r.content;
    c.entry = r.entry;
    c.concurrent = r.concurrent;
    out.push_back(std::move(c));
  }
  recs_.clear();
  return out;
}

nlohmann::ordered_json changes_json(const ChangeSummary& s) {
  using ojson = nlohmann::ordered_json;
  ojson j;
  j["roots"] = s.roots;
  // How entries are attributed to this run: by time (see "What a run
  // changed" in docs/api.md), with the ones that may be another's marked.
  j["attribution"] = "time-window";
  ojson list = ojson::array();
  uint64_t marked = 0;
  for (const auto& c : s.entries) {
    ojson e;
    e["path"] = c.path;
    e["change"] = change_op_name(c.op);
    if (c.op == ChangeOp::renamed) {
      e["from"] = c.from;
      if (c.content_changed) e["content_changed"] = true;
    }
    EntryType t = c.stat.exists ? c.stat.type : c.entry;
    e["entry"] = entry_type_name(t);
    if (c.op != ChangeOp::removed) {
      if (c.stat.exists) {
        e["size"] = c.stat.size;
        char mode[12];
        snprintf(mode, sizeof mode, "%o", c.stat.mode & 07777u);
        e["mode"] = mode;
        if (!c.sha256.empty()) e["sha256"] = c.sha256;
        if (c.hash_skipped) e["sha256_skipped"] = "larger than --track-hash-max-bytes";
      } else {
        e["exists"] = false;  // gone again after the run (a leftover process, another run)
      }
    }
    if (c.concurrent) {
      e["concurrent"] = true;
      ++marked;
    }
    list.push_back(std::move(e));
  }
  j["entries"] = std::move(list);
  j["count"] = s.entries.size();
  j["truncated"] = s.dropped > 0;
  if (s.dropped) j["not_listed"] = s.dropped;
  j["overflow"] = s.overflow;
  j["concurrent_runs"] = s.concurrent_runs;
  j["possibly_concurrent"] = marked;
  if (!s.error.empty()) j["error"] = s.error;
  return j;
}

namespace {
bool op_from(std::string_view name, ChangeOp& op) {
  for (ChangeOp o : {ChangeOp::created, ChangeOp::modified, ChangeOp::removed, ChangeOp::renamed})
    if (name == change_op_name(o)) {
      op = o;
      return true;
    }
  return false;
}
EntryType entry_from(std::string_view name) {
  for (EntryType t : {EntryType::file, EntryType::dir, EntryType::symlink, EntryType::other})
    if (name == entry_type_name(t)) return t;
  return EntryType::unknown;
}
}  // namespace

std::optional<ChangeSummary> decode_changes_json(std::string_view json) {
  thread_local simdjson::dom::parser parser;
  simdjson::dom::object obj;
  if (parser.parse(json.data(), json.size()).get(obj)) return std::nullopt;
  ChangeSummary s;
  simdjson::dom::array roots, entries, runs;
  if (obj["roots"].get(roots) || obj["entries"].get(entries)) return std::nullopt;
  for (auto r : roots) {
    std::string_view v;
    if (r.get(v)) return std::nullopt;
    s.roots.emplace_back(v);
  }
  for (auto el : entries) {
    simdjson::dom::object e;
    std::string_view path, change, entry;
    if (el.get(e) || e["path"].get(path) || e["change"].get(change) || e["entry"].get(entry)) return std::nullopt;
    ChangeEntry c;
    c.path = std::string(path);
    if (!op_from(change, c.op)) return std::nullopt;
    c.entry = entry_from(entry);
    std::string_view sv;
    if (!e["from"].get(sv)) c.from = std::string(sv);
    bool b = false;
    if (!e["content_changed"].get(b)) c.content_changed = b;
    if (!e["concurrent"].get(b)) c.concurrent = b;
    uint64_t size = 0;
    if (!e["size"].get(size)) {
      c.stat.exists = true;
      c.stat.type = c.entry;
      c.stat.size = size;
      if (!e["mode"].get(sv)) c.stat.mode = static_cast<uint32_t>(std::strtoul(std::string(sv).c_str(), nullptr, 8));
    }
    if (!e["sha256"].get(sv)) c.sha256 = std::string(sv);
    if (!e["sha256_skipped"].get(sv)) c.hash_skipped = true;
    s.entries.push_back(std::move(c));
  }
  uint64_t n = 0;
  if (!obj["not_listed"].get(n)) s.dropped = n;
  bool b = false;
  if (!obj["overflow"].get(b)) s.overflow = b;
  if (!obj["concurrent_runs"].get(runs))
    for (auto r : runs) {
      std::string_view v;
      if (!r.get(v)) s.concurrent_runs.emplace_back(v);
    }
  std::string_view err;
  if (!obj["error"].get(err)) s.error = std::string(err);
  return s;
}

}  // namespace execd::protocol
