// execd/envd/entries: E2B's view of a filesystem entry (envd's EntryInfo)
// and of a watch event's change, for the filesystem service's answers
// (api/envd/filesystem) and its watch streams (envd/watch_stream).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "execd/watch/dir_watcher.h"
#include "fs/entries.h"
#include "fs/file_info.h"
#include "protocol/envd.h"

namespace execd::envd {

// The xattr namespace of E2B's file metadata.
inline constexpr std::string_view kE2BMetadataPrefix = "user.e2b.";

protocol::envd::EntryInfo entry_info(const fs::Entry& e, fs::OwnerNames& names);
protocol::envd::EventType event_type(watch::Change c);
// Pool thread: the entry of every event that leaves one behind (envd's
// opCarriesEntry), as it is now; none for what is gone already.
void fill_entries(const std::string& dir, std::vector<protocol::envd::FsEvent>& events);

}  // namespace execd::envd
