// execd/files/upload_writer: see header.
#include "execd/files/upload_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include "execd/runners/command_spawn.h"
#include "fs/entries.h"
#include "fs/paths.h"
#include "fs/pool_job.h"
#include "protocol/errors.h"

namespace execd::files {

namespace codes = protocol::codes;

namespace {

// Directories that do not exist yet on the way to `file_path`, deepest first.
std::vector<std::string> missing_ancestors(const std::string& file_path) {
  std::vector<std::string> out;
  std::string dir = fs::parent_path(fs::clean_path(file_path));
  struct stat st {};
  while (!dir.empty() && dir != "/" && dir != "." && lstat(dir.c_str(), &st) != 0 && errno == ENOENT) {
    out.push_back(dir);
    dir = fs::parent_path(dir);
  }
  return out;
}

}  // namespace

void DiskState::run(WriteOp& op) {
  if (error && op.kind != WriteOp::abort) return;
  switch (op.kind) {
    case WriteOp::open: {
      if (op.e2b_user) return open_e2b(op);
      auto path = fs::expand_path(op.path, fs::process_env_lookup());
      if (!path) return metadata_error(path.error());
      Entry entry;
      entry.created_dirs = missing_ancestors(path.value());
      auto file = fs::AtomicFile::open(path.value(), op.spec);
      if (!file) {
        entries.push_back(std::move(entry));  // so abort removes what open created
        return metadata_error(file.error());
      }
      entry.file.emplace(std::move(file.value()));
      entry.file->enable_direct_io();  // best effort; tmpfs & co stay buffered
      entries.push_back(std::move(entry));
      return;
    }
    case WriteOp::write:
      if (auto s = entries.at(op.index).file->write(op.data.view()); !s) error = FileReply::from(s.error());
      return;
    case WriteOp::flush:
      if (auto s = entries.at(op.index).file->flush(); !s) error = FileReply::from(s.error());
      return;
    case WriteOp::commit:
      for (auto& e : entries)
        if (auto s = e.file->publish(); !s) return void(error = FileReply::from(s.error()));
      return;
    case WriteOp::abort:
      // Every temp file first: a later file may sit in a directory an
      // earlier one created. Then the directories, the latest made first,
      // each chain deepest first.
      for (auto& e : entries)
        if (e.file) e.file->abort();
      for (auto e = entries.rbegin(); e != entries.rend(); ++e)
        for (const auto& dir : e->created_dirs)
          if (rmdir(dir.c_str()) != 0) break;  // not empty (someone else's) or gone
      return;
  }
}

// E2B: no variables expanded; relative paths and ~ against the user's
// home; the file and the directories made for it belong to the user.
void DiskState::open_e2b(WriteOp& op) {
  runners::UserIds user;
  if (!runners::lookup_user(*op.e2b_user, user))
    return void(error = FileReply::error(401, codes::kUnauthorized,
                                         "error looking up user '" + *op.e2b_user + "': unknown user"));
  Entry entry;
  entry.shown_path = fs::resolve_user_path(op.path, user.home);
  entry.created_dirs = missing_ancestors(entry.shown_path);
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
  fs::PermissionSpec spec;
  if (!op.e2b_user->empty()) {
    uid = user.uid;
    gid = user.gid;
    spec.owner = std::to_string(user.uid);
    spec.group = std::to_string(user.gid);
  }
  // envd creates files 0666 & ~umask; an existing file keeps its mode.
  struct stat existing {};
  if (stat(entry.shown_path.c_str(), &existing) != 0) spec.mode = 0644;
  if (auto made = fs::make_dirs_owned(fs::parent_path(entry.shown_path), uid, gid); !made) {
    entries.push_back(std::move(entry));
    return void(error = FileReply::from(made.error()));
  }
  auto file = fs::AtomicFile::open(entry.shown_path, spec);
  if (!file) {
    entries.push_back(std::move(entry));
    return void(error = FileReply::from(file.error()));
  }
  entry.file.emplace(std::move(file.value()));
  // On the temp file: the file appears with its metadata or not at all.
  if (auto s = entry.file->write_xattrs(op.e2b_xattr_prefix, op.e2b_metadata); !s) {
    entries.push_back(std::move(entry));
    return void(error = FileReply::from(s.error()));
  }
  entry.file->enable_direct_io();
  entries.push_back(std::move(entry));
}

// Bad path or owner/group in a metadata part: the client's fault.
void DiskState::metadata_error(const fs::Error& e) {
  if (e.kind == fs::ErrorKind::bad_request)
    error = FileReply::error(400, codes::kInvalidFileMetadata, e.message);
  else
    error = FileReply::from(e);
}

// What an upload that went leaves behind: thrown away on the pool (inside
// an isolated session's mount namespace, for its uploads).
void abort_on_pool(uv_loop_t* loop, std::unique_ptr<DiskState> disk,
                   std::shared_ptr<const pty::MountNamespace> mount) {
  if (!disk || disk->entries.empty()) return;
  struct AbortJob {
    std::unique_ptr<DiskState> disk;
    std::shared_ptr<const pty::MountNamespace> mount;
  };
  fs::queue_job<AbortJob>(
      loop, std::make_unique<AbortJob>(AbortJob{std::move(disk), std::move(mount)}),
      [](AbortJob& j) {
        pty::MountScope scope(j.mount.get());
        if (scope.error()) return;
        WriteOp op = WriteOp::make(WriteOp::abort);
        j.disk->run(op);
      },
      [](AbortJob&, int) {});
}

}  // namespace execd::files
