// protocol/watch: see header.
#include "protocol/watch.h"

#include <cstdio>
#include <cstring>

#include "protocol/json_text.h"
#include "protocol/resume.h"

namespace execd::protocol {

namespace {
// struct inotify_event: int wd; uint32_t mask, cookie, len; char name[len].
constexpr size_t kInotifyHead = 16;
// NAME_MAX + 1, rounded up as the kernel pads names.
constexpr uint32_t kMaxNameLen = 4096;

void put_uint(std::string& out, uint64_t v) { out += std::to_string(v); }
void put_int(std::string& out, int64_t v) { out += std::to_string(v); }
}  // namespace

size_t parse_inotify_records(const uint8_t* buf, size_t len, std::vector<InotifyRecord>& out) {
  size_t at = 0;
  while (len - at >= kInotifyHead) {
    InotifyRecord r;
    uint32_t name_len = 0;
    memcpy(&r.wd, buf + at, 4);
    memcpy(&r.mask, buf + at + 4, 4);
    memcpy(&r.cookie, buf + at + 8, 4);
    memcpy(&name_len, buf + at + 12, 4);
    if (name_len > kMaxNameLen) return at;  // not a record the kernel writes
    if (len - at - kInotifyHead < name_len) return at;
    const char* name = reinterpret_cast<const char*>(buf + at + kInotifyHead);
    size_t n = strnlen(name, name_len);
    r.name = std::string_view(name, n);
    out.push_back(r);
    at += kInotifyHead + name_len;
  }
  return at;
}

const char* watch_kind_name(WatchKind k) {
  switch (k) {
    case WatchKind::create: return "create";
    case WatchKind::write: return "write";
    case WatchKind::remove: return "remove";
    case WatchKind::rename: return "rename";
    case WatchKind::chmod: return "chmod";
    case WatchKind::gap: return "gap";
    case WatchKind::gone: return "gone";
  }
  return "gap";
}

const char* entry_type_name(EntryType t) {
  switch (t) {
    case EntryType::file: return "file";
    case EntryType::dir: return "dir";
    case EntryType::symlink: return "symlink";
    case EntryType::other: return "other";
    case EntryType::unknown: break;
  }
  return "unknown";
}

void encode_watch_event(std::string& out, const WatchEvent& e) {
  out += "{\"seq\":";
  put_uint(out, e.seq);
  out += ",\"type\":\"";
  out += watch_kind_name(e.kind);
  out += '"';
  if (!e.path.empty()) {
    out += ",\"path\":";
    append_json_string_lossy(out, e.path);
  }
  if (e.kind == WatchKind::rename) {
    out += ",\"from\":";
    append_json_string_lossy(out, e.from);
  }
  if (e.kind != WatchKind::gap && e.kind != WatchKind::gone) {
    EntryType t = e.stat.exists ? e.stat.type : e.entry;
    out += ",\"entry\":\"";
    out += entry_type_name(t);
    out += '"';
    if (e.stat.exists && e.kind != WatchKind::remove) {
      out += ",\"size\":";
      put_uint(out, e.stat.size);
      out += ",\"mtime\":";
      put_int(out, e.stat.mtime_ms);
      char mode[12];
      snprintf(mode, sizeof mode, "%o", e.stat.mode & 07777u);
      out += ",\"mode\":\"";
      out += mode;
      out += '"';
    } else if (e.kind != WatchKind::remove) {
      // Gone again before execd looked: what it was is all there is.
      out += ",\"exists\":false";
    }
    if (e.moved) out += ",\"moved\":true";
    if (e.root) out += ",\"root\":true";
  }
  if (!e.reason.empty()) {
    out += ",\"reason\":";
    append_json_string_lossy(out, e.reason);
  }
  out += ",\"timestamp\":";
  put_int(out, e.ts_ms);
  out += "}\n";
}

void encode_watch_hello(std::string& out, std::string_view path, bool recursive, uint64_t seq, uint64_t newest,
                        int64_t ts_ms) {
  out += "{\"type\":\"watch\",\"path\":";
  append_json_string_lossy(out, path);
  out += ",\"recursive\":";
  out += recursive ? "true" : "false";
  out += ",\"seq\":";
  put_uint(out, seq);
  out += ",\"newest\":";
  put_uint(out, newest);
  out += ",\"timestamp\":";
  put_int(out, ts_ms);
  out += "}\n";
}

void encode_watch_gap(std::string& out, uint64_t since, uint64_t continues_after, std::string_view reason,
                      int64_t ts_ms) {
  out += "{\"type\":\"gap\",\"since\":";
  put_uint(out, since);
  out += ",\"continues_after\":";
  put_uint(out, continues_after);
  out += ",\"reason\":";
  append_json_string_lossy(out, reason);
  out += ",\"timestamp\":";
  put_int(out, ts_ms);
  out += "}\n";
}

void encode_watch_ping(std::string& out, uint64_t seq, int64_t ts_ms) {
  out += "{\"type\":\"ping\",\"seq\":";
  put_uint(out, seq);
  out += ",\"timestamp\":";
  put_int(out, ts_ms);
  out += "}\n";
}

std::optional<WatchQuery> decode_watch_query(const std::string* path, const std::string* recursive,
                                             const std::string* since, std::string& error) {
  WatchQuery q;
  if (!path || path->empty()) {
    error = "missing query parameter 'path'";
    return std::nullopt;
  }
  if (path->find('\0') != std::string::npos) {
    error = "path contains a NUL byte";
    return std::nullopt;
  }
  q.path = *path;
  if (recursive && !recursive->empty()) {
    if (*recursive == "true" || *recursive == "1") q.recursive = true;
    else if (*recursive == "false" || *recursive == "0") q.recursive = false;
    else {
      error = "recursive must be true or false";
      return std::nullopt;
    }
  }
  if (since && !since->empty()) {
    q.since = parse_offset(*since);
    if (!q.since) {
      error = "since must be a sequence number (a non-negative integer)";
      return std::nullopt;
    }
  }
  return q;
}

}  // namespace execd::protocol
