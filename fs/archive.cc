// fs/archive: see header.
#include "fs/archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "fs/accounts.h"
#include "fs/paths.h"

namespace execd::fs {

std::optional<ArchiveFormat> archive_format_from_name(const std::string& name) {
  if (name.empty() || name == "tar") return ArchiveFormat::tar;
  if (name == "tar.gz" || name == "tgz") return ArchiveFormat::tar_gz;
  if (name == "zip") return ArchiveFormat::zip;
  return std::nullopt;
}

const char* archive_content_type(ArchiveFormat f) {
  switch (f) {
    case ArchiveFormat::tar: return "application/x-tar";
    case ArchiveFormat::tar_gz: return "application/gzip";
    case ArchiveFormat::zip: return "application/zip";
  }
  return "application/octet-stream";
}

const char* archive_extension(ArchiveFormat f) {
  switch (f) {
    case ArchiveFormat::tar: return ".tar";
    case ArchiveFormat::tar_gz: return ".tar.gz";
    case ArchiveFormat::zip: return ".zip";
  }
  return "";
}

namespace {

Error archive_error(struct archive* a, std::string_view what, ErrorKind kind = ErrorKind::internal) {
  const char* msg = archive_error_string(a);
  int err = archive_errno(a);
  if (kind == ErrorKind::internal && err > 0) kind = kind_for_errno(err);
  return Error{kind, std::string(what) + ": " + (msg ? msg : "unknown libarchive error")};
}

// Holes are handed to the writer as zeros: tar's pax writer skips them
// (they are in the entry's sparse map), zip stores them (deflated).
const char kZeros[64 * 1024] = {};

la_ssize_t write_to_sink(struct archive*, void* client, const void* buf, size_t len) {
  auto* sink = static_cast<std::string**>(client);
  if (*sink) (*sink)->append(static_cast<const char*>(buf), len);
  return static_cast<la_ssize_t>(len);
}

}  // namespace

// ---------------------------------------------------------------------------
// Writing an archive of a directory

namespace {

// names[id], looked up the first time (lookup(id) for an id >= 0); past
// `keep` names the map starts over (a tree of many owners).
template <typename Lookup>
const char* cached_name(std::map<int64_t, std::optional<std::string>>& names, size_t keep, int64_t id,
                        Lookup lookup) {
  if (names.size() >= keep && !names.count(id)) names.clear();
  auto [it, fresh] = names.try_emplace(id);
  if (fresh && id >= 0) it->second = lookup(id);
  return it->second ? it->second->c_str() : nullptr;
}

}  // namespace

const char* DirArchiver::user_name(void* self, int64_t id) {
  return cached_name(static_cast<DirArchiver*>(self)->user_names_, kNamesKept, id,
                     [](int64_t uid) -> std::optional<std::string> {
                       if (auto a = account_with_uid(static_cast<uid_t>(uid))) return std::move(a->name);
                       return std::nullopt;
                     });
}

const char* DirArchiver::group_name(void* self, int64_t id) {
  return cached_name(static_cast<DirArchiver*>(self)->group_names_, kNamesKept, id,
                     [](int64_t gid) -> std::optional<std::string> {
                       if (auto g = group_with_gid(static_cast<gid_t>(gid))) return std::move(g->name);
                       return std::nullopt;
                     });
}

Result<std::unique_ptr<DirArchiver>> DirArchiver::open(const std::string& path, ArchiveFormat format) {
  char real[PATH_MAX];
  if (!realpath(path.c_str(), real)) {
    Error e = errno_error(errno, "open " + path);
    if (e.kind == ErrorKind::not_found) e.message = "directory not found: " + path;
    return e;
  }
  struct stat st {};
  if (stat(real, &st) != 0) return errno_error(errno, std::string("stat ") + real);
  if (!S_ISDIR(st.st_mode)) return Error{ErrorKind::bad_request, "path is not a directory: " + path};
  if (access(real, R_OK | X_OK) != 0) return errno_error(errno, std::string("open ") + real);

  std::unique_ptr<DirArchiver> d(new DirArchiver);
  d->root_ = real;
  d->disk_ = archive_read_disk_new();
  d->writer_ = archive_write_new();
  if (!d->disk_ || !d->writer_) return Error{ErrorKind::internal, "libarchive: out of memory"};
  // Symlinks are stored as symlinks, never followed; no xattrs, ACLs or
  // file flags (plain, portable archives; no lookups beyond the owner names).
  archive_read_disk_set_symlink_physical(d->disk_);
  // Names through fs/accounts, not libarchive's own lookup (NSS, which a
  // static execd must not use).
  archive_read_disk_set_uname_lookup(d->disk_, d.get(), &DirArchiver::user_name, nullptr);
  archive_read_disk_set_gname_lookup(d->disk_, d.get(), &DirArchiver::group_name, nullptr);
  archive_read_disk_set_behavior(d->disk_,
                                 ARCHIVE_READDISK_NO_XATTR | ARCHIVE_READDISK_NO_ACL | ARCHIVE_READDISK_NO_FFLAGS);
  if (archive_read_disk_open(d->disk_, d->root_.c_str()) != ARCHIVE_OK)
    return archive_error(d->disk_, "open " + d->root_);
  int rc = ARCHIVE_OK;
  switch (format) {
    case ArchiveFormat::tar:
    case ArchiveFormat::tar_gz:
      // pax (restricted): plain ustar headers unless a name, a size or a
      // sparse map needs the pax extension; every tar reads it.
      rc = archive_write_set_format_pax_restricted(d->writer_);
      if (rc == ARCHIVE_OK && format == ArchiveFormat::tar_gz) rc = archive_write_add_filter_gzip(d->writer_);
      d->fill_holes_ = false;
      break;
    case ArchiveFormat::zip:
      rc = archive_write_set_format_zip(d->writer_);
      break;
  }
  if (rc != ARCHIVE_OK) return archive_error(d->writer_, "libarchive");
  // Plain tar ends on a whole 10240-byte record, as tar writes it; a gzip
  // stream or a zip file ends where it ends (padding there is trailing
  // garbage to gzip).
  if (format != ArchiveFormat::tar) archive_write_set_bytes_in_last_block(d->writer_, 1);
  if (archive_write_open2(d->writer_, &d->sink_, nullptr, write_to_sink, nullptr, nullptr) != ARCHIVE_OK)
    return archive_error(d->writer_, "libarchive");
  if (format != ArchiveFormat::zip) {
    // A file with several names is stored once, then as hard links.
    d->links_ = archive_entry_linkresolver_new();
    archive_entry_linkresolver_set_strategy(d->links_, archive_format(d->writer_));
  }
  return d;
}

DirArchiver::~DirArchiver() {
  if (links_) archive_entry_linkresolver_free(links_);
  if (writer_) archive_write_free(writer_);  // closes it first if still open
  if (disk_) archive_read_free(disk_);
}

Status DirArchiver::produce(std::string& out, size_t want) {
  sink_ = &out;
  Status st;
  while (st && !finished_ && out.size() < want) st = in_data_ ? copy_data(out, want) : next_entry();
  sink_ = nullptr;
  return st;
}

Status DirArchiver::next_entry() {
  struct archive_entry* e = archive_entry_new();
  int r = archive_read_next_header2(disk_, e);
  if (r == ARCHIVE_EOF) {
    archive_entry_free(e);
    if (archive_write_close(writer_) != ARCHIVE_OK) return archive_error(writer_, "finishing the archive");
    finished_ = true;
    return {};
  }
  if (r < ARCHIVE_WARN) {
    Error err = archive_error(disk_, "reading " + root_);
    archive_entry_free(e);
    return err;
  }
  archive_read_disk_descend(disk_);  // a directory's entries follow it
  std::string path = archive_entry_pathname(e) ? archive_entry_pathname(e) : "";
  if (path == root_ || path.size() <= root_.size() + 1) {
    archive_entry_free(e);  // the root itself: the archive holds what is in it
    return {};
  }
  archive_entry_copy_pathname(e, path.c_str() + root_.size() + 1);
  if (archive_entry_filetype(e) == AE_IFSOCK) {
    archive_entry_free(e);  // no archive format stores a socket
    return {};
  }
  if (fill_holes_) archive_entry_sparse_clear(e);
  struct archive_entry* spare = nullptr;
  if (links_) archive_entry_linkify(links_, &e, &spare);
  if (spare) archive_entry_free(spare);
  if (!e) return {};
  bool data = archive_entry_filetype(e) == AE_IFREG && archive_entry_size(e) > 0 && !archive_entry_hardlink(e);
  if (archive_write_header(writer_, e) < ARCHIVE_WARN) {
    Error err = archive_error(writer_, std::string("writing the header of ") + archive_entry_pathname(e));
    archive_entry_free(e);
    return err;
  }
  ++entries_;
  if (data) {
    in_data_ = true;
    data_at_ = 0;
    data_size_ = static_cast<uint64_t>(archive_entry_size(e));
    data_path_ = path;
    data_dev_ = static_cast<uint64_t>(archive_entry_dev(e));
    data_ino_ = static_cast<uint64_t>(archive_entry_ino64(e));
  }
  archive_entry_free(e);
  return {};
}

// libarchive reads a file up to the size its header gave, no further, and
// hands a trailing hole over as an empty block at that size: a file that
// ends sooner shrank, and one that is larger once its last block is in hand
// grew. Either way the member cannot hold what the file holds, and padding
// it with zeros or cutting it short would be a silently wrong archive.
Status DirArchiver::copy_data(std::string& out, size_t want) {
  auto zeros = [&](uint64_t n) -> Status {
    while (n > 0) {
      size_t k = n < sizeof kZeros ? static_cast<size_t>(n) : sizeof kZeros;
      if (archive_write_data(writer_, kZeros, k) < 0) return archive_error(writer_, "writing the archive");
      n -= k;
      data_at_ += k;
    }
    return {};
  };
  while (out.size() < want) {
    const void* buf = nullptr;
    size_t size = 0;
    la_int64_t offset = 0;
    int r = archive_read_data_block(disk_, &buf, &size, &offset);
    if (r == ARCHIVE_EOF) {
      if (data_at_ < data_size_)
        return Error{ErrorKind::conflict, data_path_ + " shrank while it was archived: " + std::to_string(data_size_) +
                                              " bytes in its header, " + std::to_string(data_at_) + " read"};
      in_data_ = false;
      return {};
    }
    if (r < ARCHIVE_WARN) return archive_error(disk_, "reading a file below " + root_);
    uint64_t at = static_cast<uint64_t>(offset);
    // Checked before the last block is written: a grown file's member then
    // ends short in what was produced, and no reader takes it for whole.
    if (at + size >= data_size_)
      if (Status s = check_size_unchanged(); !s) return s;
    if (at > data_at_)
      if (Status s = zeros(at - data_at_); !s) return s;
    if (size > 0 && archive_write_data(writer_, buf, size) < 0) return archive_error(writer_, "writing the archive");
    data_at_ = at + size;
  }
  return {};
}

// The file as it is now against its header. Another file under its name
// (the file was replaced, or removed, after it was read) says nothing about
// the one read: only a change of the same file counts.
Status DirArchiver::check_size_unchanged() const {
  struct stat st {};
  if (lstat(data_path_.c_str(), &st) != 0) return {};
  if (static_cast<uint64_t>(st.st_dev) != data_dev_ || static_cast<uint64_t>(st.st_ino) != data_ino_) return {};
  if (static_cast<uint64_t>(st.st_size) == data_size_) return {};
  return Error{ErrorKind::conflict, data_path_ + (static_cast<uint64_t>(st.st_size) > data_size_ ? " grew" : " shrank") +
                                        " while it was archived: " + std::to_string(data_size_) +
                                        " bytes in its header, " + std::to_string(st.st_size) + " now"};
}

// ---------------------------------------------------------------------------
// Extracting

namespace {

int discard_entry(const char* path, const struct stat*, int, struct FTW*) {
  remove(path);
  return 0;
}

void discard_tree(const std::string& path) {
  if (path.empty()) return;
  nftw(path.c_str(), discard_entry, 64, FTW_DEPTH | FTW_PHYS);
}

int chown_entry(const char* path, const struct stat*, int, struct FTW*);
thread_local const ResolvedPermissions* tl_owner = nullptr;
thread_local int tl_chown_errno = 0;
int chown_entry(const char* path, const struct stat*, int, struct FTW*) {
  uid_t uid = tl_owner->uid ? *tl_owner->uid : static_cast<uid_t>(-1);
  gid_t gid = tl_owner->gid ? *tl_owner->gid : static_cast<gid_t>(-1);
  if (lchown(path, uid, gid) != 0) {
    tl_chown_errno = errno;
    return 1;
  }
  return 0;
}

// "a/./b//c/" -> {"a","b","c"}; false if a component is "..".
bool split_clean(const std::string& path, std::vector<std::string>& parts) {
  parts.clear();
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    std::string part = path.substr(i, j - i);
    if (part == "..") return false;
    if (!part.empty() && part != ".") parts.push_back(std::move(part));
    i = j + 1;
  }
  return true;
}

std::string join_parts(const std::vector<std::string>& parts, size_t n) {
  std::string out;
  for (size_t i = 0; i < n && i < parts.size(); ++i) {
    if (i) out += '/';
    out += parts[i];
  }
  return out;
}

// Where a relative symlink in directory `dir_parts` lands, lexically; false
// if it climbs out of the root.
bool link_stays_inside(const std::vector<std::string>& dir_parts, const std::string& target) {
  std::vector<std::string> at = dir_parts;
  size_t i = 0;
  while (i <= target.size()) {
    size_t j = target.find('/', i);
    if (j == std::string::npos) j = target.size();
    std::string part = target.substr(i, j - i);
    if (part == "..") {
      if (at.empty()) return false;
      at.pop_back();
    } else if (!part.empty() && part != ".") {
      at.push_back(std::move(part));
    }
    i = j + 1;
  }
  return true;
}

bool dir_has_nothing(const std::string& path) {
  DIR* d = opendir(path.c_str());
  if (!d) return false;
  bool empty = true;
  while (struct dirent* e = readdir(d))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
      empty = false;
      break;
    }
  closedir(d);
  return empty;
}

Error refuse_entry(const std::string& entry, const std::string& why) {
  return Error{ErrorKind::bad_request, "archive entry \"" + entry + "\" refused: " + why};
}

struct Extraction {
  const ExtractOptions& opt;
  std::string tmp;
  ExtractResult result;
  std::set<std::string> files;     // regular files extracted (hard link targets)
  std::set<std::string> symlinks;  // symlinks extracted: nothing may be written through one
  std::optional<mode_t> root_mode;

  Status run(int archive_fd) {
    struct archive* a = archive_read_new();
    struct archive* w = archive_write_disk_new();
    if (!a || !w) {
      if (a) archive_read_free(a);
      if (w) archive_write_free(w);
      return Error{ErrorKind::internal, "libarchive: out of memory"};
    }
    archive_read_support_format_tar(a);
    archive_read_support_format_zip(a);
    archive_read_support_filter_gzip(a);
    archive_read_support_filter_bzip2(a);
    archive_read_support_filter_xz(a);
    archive_read_support_filter_zstd(a);
    // Our own checks come first (and refuse the whole archive); these are
    // libarchive's, as a second line. No owners restored from the archive.
    // SPARSE: runs of zeros become holes (a zip has no sparse entries).
    archive_write_disk_set_options(w, ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                                          ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SPARSE);
    Status st = entries(a, w, archive_fd);
    if (st && archive_write_close(w) != ARCHIVE_OK) st = archive_error(w, "finishing the extraction");
    archive_read_free(a);
    archive_write_free(w);
    return st;
  }

  Status entries(struct archive* a, struct archive* w, int archive_fd) {
    if (lseek(archive_fd, 0, SEEK_SET) != 0) return errno_error(errno, "rewinding the archive");
    if (archive_read_open_fd(a, archive_fd, 1 << 16) != ARCHIVE_OK)
      return archive_error(a, "not a tar or zip archive", ErrorKind::bad_request);
    std::vector<std::string> parts, link_parts;
    for (;;) {
      if (opt.cancelled && opt.cancelled->load()) return Error{ErrorKind::internal, "the client left"};
      struct archive_entry* e = nullptr;
      int r = archive_read_next_header(a, &e);
      if (r == ARCHIVE_EOF) break;
      if (r < ARCHIVE_WARN)
        return archive_error(a, result.entries == 0 ? "not a tar or zip archive"
                                                    : "corrupt archive after " + std::to_string(result.entries) + " entries",
                             ErrorKind::bad_request);
      if (result.format.empty() && archive_format_name(a)) result.format = archive_format_name(a);
      const char* raw = archive_entry_pathname(e);
      std::string name = raw ? raw : "";
      if (name.empty()) return refuse_entry(name, "no name");
      if (name[0] == '/') return refuse_entry(name, "absolute path");
      if (!split_clean(name, parts)) return refuse_entry(name, "\"..\" in its path");
      mode_t type = archive_entry_filetype(e);
      const char* hard = archive_entry_hardlink(e);
      if (parts.empty()) {
        // "./" itself: its mode becomes the target directory's.
        if (type == AE_IFDIR) root_mode = archive_entry_perm(e) & 0777;
        continue;
      }
      std::string rel = join_parts(parts, parts.size());
      for (size_t n = 1; n < parts.size(); ++n)
        if (symlinks.count(join_parts(parts, n))) return refuse_entry(name, "it would be written through the symlink " + join_parts(parts, n));
      if (++result.entries > opt.max_entries)
        return Error{ErrorKind::too_large, "the archive has more than " + std::to_string(opt.max_entries) +
                                               " entries (--archive-max-entries)"};
      std::string hard_rel;
      if (hard) {
        std::string h = hard;
        if (h.empty() || h[0] == '/' || !split_clean(h, link_parts) || link_parts.empty())
          return refuse_entry(name, "hard link to \"" + h + "\", outside the archive");
        hard_rel = join_parts(link_parts, link_parts.size());
        if (!files.count(hard_rel)) return refuse_entry(name, "hard link to \"" + h + "\", not an earlier file of the archive");
      } else if (type == AE_IFLNK) {
        const char* t = archive_entry_symlink(e);
        std::string target = t ? t : "";
        if (target.empty()) return refuse_entry(name, "empty symlink");
        if (target[0] == '/') return refuse_entry(name, "symlink to an absolute path (" + target + ")");
        std::vector<std::string> dir(parts.begin(), parts.end() - 1);
        if (!link_stays_inside(dir, target)) return refuse_entry(name, "symlink pointing out of the target (" + target + ")");
      } else if (type == AE_IFCHR || type == AE_IFBLK) {
        return refuse_entry(name, "device file");
      } else if (type == AE_IFIFO) {
        return refuse_entry(name, "FIFO");
      } else if (type == AE_IFSOCK) {
        return refuse_entry(name, "socket");
      } else if (type != AE_IFREG && type != AE_IFDIR) {
        return refuse_entry(name, "unknown entry type");
      }
      int64_t declared = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
      if (declared < 0 || result.bytes + static_cast<uint64_t>(declared) > opt.max_bytes)
        return Error{ErrorKind::too_large, "the archive holds more than " + std::to_string(opt.max_bytes) +
                                               " bytes (--archive-max-bytes)"};
      std::string full = tmp + "/" + rel;
      archive_entry_copy_pathname(e, full.c_str());
      if (hard) archive_entry_copy_hardlink(e, (tmp + "/" + hard_rel).c_str());
      // No setuid, setgid or sticky bits from an archive.
      archive_entry_set_perm(e, archive_entry_perm(e) & 0777);
      if (archive_write_header(w, e) < ARCHIVE_WARN) return archive_error(w, "\"" + name + "\"", ErrorKind::bad_request);
      if (!hard && type == AE_IFREG) {
        const void* buf = nullptr;
        size_t size = 0;
        la_int64_t offset = 0;
        for (;;) {
          int rr = archive_read_data_block(a, &buf, &size, &offset);
          if (rr == ARCHIVE_EOF) break;
          if (rr < ARCHIVE_WARN) return archive_error(a, "reading \"" + name + "\"", ErrorKind::bad_request);
          // A header may understate its data (a zip entry with a data
          // descriptor): the limit counts what is written.
          result.bytes += size;
          if (result.bytes > opt.max_bytes)
            return Error{ErrorKind::too_large, "the archive holds more than " + std::to_string(opt.max_bytes) +
                                                   " bytes (--archive-max-bytes)"};
          if (opt.cancelled && opt.cancelled->load()) return Error{ErrorKind::internal, "the client left"};
          if (archive_write_data_block(w, buf, size, offset) < ARCHIVE_WARN)
            return archive_error(w, "writing \"" + name + "\"");
        }
      }
      if (archive_write_finish_entry(w) < ARCHIVE_WARN) return archive_error(w, "writing \"" + name + "\"");
      if (hard) {
        ++result.hardlinks;
      } else if (type == AE_IFREG) {
        ++result.files;
        files.insert(rel);
        symlinks.erase(rel);
      } else if (type == AE_IFDIR) {
        ++result.directories;
        symlinks.erase(rel);
      } else if (type == AE_IFLNK) {
        ++result.symlinks;
        symlinks.insert(rel);
        files.erase(rel);
      }
    }
    if (result.format.empty() && archive_format_name(a)) result.format = archive_format_name(a);
    return {};
  }
};

}  // namespace

Result<ExtractResult> extract_archive(int archive_fd, const std::string& target,
                                      const ExtractOptions& options) {
  std::string clean = clean_path(target);
  if (clean.empty() || clean[0] != '/' || clean == "/") return Error{ErrorKind::bad_request, "bad target: " + target};
  std::string parent = parent_path(clean), name = base_name(clean);
  // Missing directories on the way are made (as an upload makes them), and
  // removed again if the extraction fails.
  std::vector<std::string> made;
  {
    std::vector<std::string> missing;
    std::string d = parent;
    struct stat st {};
    while (d != "/" && lstat(d.c_str(), &st) != 0 && errno == ENOENT) {
      missing.push_back(d);
      d = parent_path(d);
    }
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
      if (mkdir(it->c_str(), 0755) != 0 && errno != EEXIST) {
        Error e = errno_error(errno, "mkdir " + *it);
        for (auto m = made.rbegin(); m != made.rend(); ++m) rmdir(m->c_str());
        return e;
      }
      made.push_back(*it);
    }
  }
  auto undo_dirs = [&] {
    for (auto m = made.rbegin(); m != made.rend(); ++m) rmdir(m->c_str());
  };
  char real[PATH_MAX];
  if (!realpath(parent.c_str(), real)) {
    Error e = errno_error(errno, "open " + parent);
    undo_dirs();
    return e;
  }
  std::string final_path = std::string(real) == "/" ? "/" + name : std::string(real) + "/" + name;
  struct stat st {};
  bool exists = lstat(final_path.c_str(), &st) == 0;
  bool empty_dir = exists && S_ISDIR(st.st_mode) && dir_has_nothing(final_path);
  if (exists && !empty_dir && !options.replace) {
    undo_dirs();
    return Error{ErrorKind::conflict, final_path + " exists and is not an empty directory (replace=true swaps it)"};
  }
  std::string tmpl = std::string(real) + "/." + name + ".execd-extract-XXXXXX";
  if (!mkdtemp(tmpl.data())) {
    Error e = errno_error(errno, "mkdtemp in " + std::string(real));
    undo_dirs();
    return e;
  }
  Extraction x{options, tmpl, {}, {}, {}, {}};
  Status s = x.run(archive_fd);
  auto fail = [&](Error e) -> Result<ExtractResult> {
    discard_tree(x.tmp);
    undo_dirs();
    return e;
  };
  if (!s) return fail(s.error());
  if (options.owner.changes_owner()) {
    tl_owner = &options.owner;
    tl_chown_errno = 0;
    if (nftw(x.tmp.c_str(), chown_entry, 64, FTW_PHYS) != 0)
      return fail(errno_error(tl_chown_errno ? tl_chown_errno : EIO, "chown below " + final_path));
  }
  mode_t mode = options.owner.mode ? *options.owner.mode : x.root_mode ? *x.root_mode : 0755;
  if (chmod(x.tmp.c_str(), mode) != 0) return fail(errno_error(errno, "chmod " + x.tmp));
  // Durable before it becomes visible: one syncfs for the whole tree.
  if (int fd = ::open(x.tmp.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); fd >= 0) {
    syncfs(fd);
    ::close(fd);
  }
  if (!exists || empty_dir) {
    // rename(2) replaces an empty directory atomically; anything else that
    // appeared meanwhile makes it fail rather than be replaced.
    int rc = empty_dir ? rename(x.tmp.c_str(), final_path.c_str())
                       : renameat2(AT_FDCWD, x.tmp.c_str(), AT_FDCWD, final_path.c_str(), RENAME_NOREPLACE);
    if (rc != 0) {
      int err = errno;
      if (err == EEXIST || err == ENOTEMPTY)
        return fail(Error{ErrorKind::conflict, final_path + " appeared while the archive was extracted"});
      return fail(errno_error(err, "rename into " + final_path));
    }
  } else {
    // replace=true: the new tree and the old one swap places in one step;
    // the old one is then removed.
    if (renameat2(AT_FDCWD, x.tmp.c_str(), AT_FDCWD, final_path.c_str(), RENAME_EXCHANGE) != 0)
      return fail(errno_error(errno, "swap into " + final_path));
    x.result.replaced = true;
    discard_tree(x.tmp);
  }
  return x.result;
}

}  // namespace execd::fs
