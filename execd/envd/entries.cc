// execd/envd/entries: see header.
#include "execd/envd/entries.h"

#include "fs/xattrs.h"

namespace execd::envd {

namespace wire = protocol::envd;

wire::EntryInfo entry_info(const fs::Entry& e, fs::OwnerNames& names) {
  wire::EntryInfo out;
  out.name = e.name;
  out.path = e.path;
  const struct stat& kind = e.is_symlink && e.target_ok ? e.target : e.st;
  // A symlink reports its target's type and says it is a link (envd >= 0.6.x).
  if (S_ISREG(kind.st_mode)) out.type = wire::FileType::file;
  else if (S_ISDIR(kind.st_mode)) out.type = wire::FileType::directory;
  else if (S_ISLNK(kind.st_mode)) out.type = wire::FileType::symlink;
  out.is_symlink = e.is_symlink;
  if (e.is_symlink) out.symlink_target = e.resolved;
  out.size = static_cast<int64_t>(e.st.st_size);
  out.mode = static_cast<uint32_t>(kind.st_mode & 0777);
  out.permissions = wire::go_file_mode_string(e.st.st_mode);
  out.owner = names.user(e.st.st_uid);
  out.group = names.group(e.st.st_gid);
  out.modified = e.st.st_mtim;
  out.metadata = fs::read_xattrs(e.path, kE2BMetadataPrefix);  // envd reports user.e2b.* however set
  return out;
}

wire::EventType event_type(watch::Change c) {
  switch (c) {
    case watch::Change::create:
      return wire::EventType::create;
    case watch::Change::write:
      return wire::EventType::write;
    case watch::Change::remove:
      return wire::EventType::remove;
    case watch::Change::rename:
      return wire::EventType::rename;
    case watch::Change::chmod:
      return wire::EventType::chmod;
  }
  return wire::EventType::unspecified;
}

void fill_entries(const std::string& dir, std::vector<wire::FsEvent>& events) {
  fs::OwnerNames names;
  for (auto& ev : events) {
    if (ev.type != wire::EventType::create && ev.type != wire::EventType::write &&
        ev.type != wire::EventType::chmod)
      continue;
    auto e = fs::stat_entry(dir + "/" + ev.name);
    if (e) ev.entry = entry_info(e.value(), names);
  }
}

}  // namespace execd::envd
