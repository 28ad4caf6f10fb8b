// fs/layer: see header.
#include "fs/layer.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>

namespace execd::fs {

namespace {

constexpr size_t kMaxDepth = 256;

}  // namespace

// Named, not anonymous: LayerTarball::State holds one, and a unity build
// would see an anonymous type inside a type with linkage.
namespace layer_walk {

// Pre-order over an upper directory: a directory, then what it holds, each
// level's names sorted; never follows a symlink.
class UpperWalk {
 public:
  struct Entry {
    std::string rel;  // "" for the upper's root itself (not returned)
    std::string name;
    int parent = -1;  // valid until the next call
    struct stat st {};
    bool whiteout = false, opaque = false;
  };

  explicit UpperWalk(const std::string& root) {
    int fd = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      error = "open " + root + ": " + strerror(errno);
      return;
    }
    push(fd, "");
  }
  ~UpperWalk() {
    for (auto& f : stack_) close(f.fd);
  }
  UpperWalk(const UpperWalk&) = delete;
  UpperWalk& operator=(const UpperWalk&) = delete;

  // False at the end (or on an error, then `error` is set).
  bool next(Entry& e) {
    while (!stack_.empty()) {
      Frame& f = stack_.back();
      if (f.i >= f.names.size()) {
        close(f.fd);
        stack_.pop_back();
        continue;
      }
      const std::string name = f.names[f.i++];
      e.name = name;
      e.rel = f.rel.empty() ? name : f.rel + "/" + name;
      e.parent = f.fd;
      if (fstatat(f.fd, name.c_str(), &e.st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;  // gone meanwhile
        error = "stat " + e.rel + ": " + strerror(errno);
        return false;
      }
      e.whiteout = false;
      e.opaque = false;
      if (S_ISCHR(e.st.st_mode) && e.st.st_rdev == makedev(0, 0)) e.whiteout = true;
      if (S_ISREG(e.st.st_mode) && e.st.st_size == 0 && has_xattr(f.fd, name, "overlay.whiteout", false))
        e.whiteout = true;
      if (S_ISDIR(e.st.st_mode)) {
        int fd = openat(f.fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
          if (errno == ENOENT) continue;
          error = "open " + e.rel + ": " + strerror(errno);
          return false;
        }
        e.opaque = has_xattr(fd, "", "overlay.opaque", true);
        if (stack_.size() >= kMaxDepth) {
          close(fd);
          error = "deeper than " + std::to_string(kMaxDepth) + " levels: " + e.rel;
          return false;
        }
        push(fd, e.rel);  // e.parent stays valid: frames are not moved (deque-like use below)
        e.parent = stack_[stack_.size() - 2].fd;
      }
      return true;
    }
    return false;
  }

  std::string error;

 private:
  struct Frame {
    int fd;
    std::string rel;
    std::vector<std::string> names;
    size_t i = 0;
  };

  // "trusted." (overlay mounted by root) or "user." (mounted with userxattr).
  static bool has_xattr(int dirfd, const std::string& name, const char* key, bool want_y) {
    char value[8];
    for (const char* ns : {"trusted.", "user."}) {
      std::string full = std::string(ns) + key;
      ssize_t n;
      if (name.empty()) {
        n = fgetxattr(dirfd, full.c_str(), value, sizeof value);
      } else {
        std::string path = "/proc/self/fd/" + std::to_string(dirfd) + "/" + name;
        n = lgetxattr(path.c_str(), full.c_str(), value, sizeof value);
      }
      if (n >= 0 && (!want_y || (n >= 1 && value[0] == 'y'))) return true;
    }
    return false;
  }

  void push(int fd, std::string rel) {
    Frame f{fd, std::move(rel), {}, 0};
    int dup_fd = dup(fd);
    if (DIR* d = dup_fd >= 0 ? fdopendir(dup_fd) : nullptr) {
      while (dirent* de = readdir(d))
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) f.names.emplace_back(de->d_name);
      closedir(d);
    } else if (dup_fd >= 0) {
      close(dup_fd);
    }
    std::sort(f.names.begin(), f.names.end());
    stack_.push_back(std::move(f));
  }

  std::vector<Frame> stack_;
};

}  // namespace layer_walk
using layer_walk::UpperWalk;

namespace {

std::string inside_path(const std::string& target, const std::string& rel) {
  return target == "/" ? "/" + rel : target + "/" + rel;
}

const char* type_name(mode_t m) {
  if (S_ISREG(m)) return "file";
  if (S_ISDIR(m)) return "directory";
  if (S_ISLNK(m)) return "symlink";
  return "other";
}

// --- tar -------------------------------------------------------------------------

void put_octal(char* field, size_t width, uint64_t v) {
  // width-1 digits and a NUL.
  std::string s(width - 1, '0');
  for (size_t i = width - 1; i-- > 0 && v;) {
    s[i] = static_cast<char>('0' + (v & 7));
    v >>= 3;
  }
  memcpy(field, s.data(), width - 1);
  field[width - 1] = '\0';
}

bool fits_octal(uint64_t v, size_t width) { return width - 1 >= 22 || v < (1ull << (3 * (width - 1))); }

void pax_record(std::string& out, const std::string& key, const std::string& value) {
  // "<len> key=value\n", where len counts itself.
  size_t body = key.size() + value.size() + 3;  // ' ', '=', '\n'
  size_t len = body + 1;
  while (std::to_string(len).size() + body != len) len = std::to_string(len).size() + body;
  out += std::to_string(len) + " " + key + "=" + value + "\n";
}

void pad_block(std::string& raw) {
  size_t rem = raw.size() % 512;
  if (rem) raw.append(512 - rem, '\0');
}

void write_header(std::string& raw, const std::string& name, char type, const struct stat& st, uint64_t size,
                  const std::string& link = {}) {
  uint64_t mode = st.st_mode & 07777;
  std::string pax;
  if (name.size() > 100) pax_record(pax, "path", name);
  if (link.size() > 100) pax_record(pax, "linkpath", link);
  if (!fits_octal(size, 12)) pax_record(pax, "size", std::to_string(size));
  if (!fits_octal(st.st_uid, 8)) pax_record(pax, "uid", std::to_string(st.st_uid));
  if (!fits_octal(st.st_gid, 8)) pax_record(pax, "gid", std::to_string(st.st_gid));
  auto header = [&raw](const std::string& n, char t, uint64_t m, uint64_t uid, uint64_t gid, uint64_t sz,
                       int64_t mtime, const std::string& l, uint32_t major, uint32_t minor) {
    char h[512];
    memset(h, 0, sizeof h);
    memcpy(h, n.data(), std::min<size_t>(n.size(), 100));
    put_octal(h + 100, 8, m);
    put_octal(h + 108, 8, fits_octal(uid, 8) ? uid : 0);
    put_octal(h + 116, 8, fits_octal(gid, 8) ? gid : 0);
    put_octal(h + 124, 12, fits_octal(sz, 12) ? sz : 0);
    put_octal(h + 136, 12, mtime > 0 ? static_cast<uint64_t>(mtime) : 0);
    memset(h + 148, ' ', 8);
    h[156] = t;
    memcpy(h + 157, l.data(), std::min<size_t>(l.size(), 100));
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    put_octal(h + 329, 8, major);
    put_octal(h + 337, 8, minor);
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    char chk[8];
    snprintf(chk, sizeof chk, "%06o", sum);
    memcpy(h + 148, chk, 6);
    h[154] = '\0';
    h[155] = ' ';
    raw.append(h, sizeof h);
  };
  if (!pax.empty()) {
    std::string pax_name = "PaxHeaders/" + name.substr(0, 80);
    header(pax_name, 'x', 0644, 0, 0, pax.size(), st.st_mtime, "", 0, 0);
    raw += pax;
    pad_block(raw);
  }
  uint32_t major = 0, minor = 0;
  if (type == '3' || type == '4') {
    major = ::major(st.st_rdev);
    minor = ::minor(st.st_rdev);
  }
  header(name, type, mode, st.st_uid, st.st_gid, size, st.st_mtime, link, major, minor);
}

}  // namespace

LayerDiff diff_layers(const std::vector<LayerSource>& layers, size_t max_changes) {
  LayerDiff d;
  for (const LayerSource& layer : layers) {
    UpperWalk walk(layer.upper);
    UpperWalk::Entry e;
    while (walk.next(e)) {
      std::string inside = inside_path(layer.target, e.rel);
      struct stat lower {};
      bool in_lower = lstat(inside.c_str(), &lower) == 0;
      LayerChange c;
      c.path = inside;
      if (e.whiteout) {
        c.change = "deleted";
        c.type = in_lower ? type_name(lower.st_mode) : "file";
      } else if (S_ISDIR(e.st.st_mode)) {
        if (e.opaque && in_lower) c.change = "replaced";
        else if (!in_lower) c.change = "added";
        else continue;  // there only for what changed beneath it
        c.type = "directory";
      } else {
        c.change = in_lower ? "modified" : "added";
        c.type = type_name(e.st.st_mode);
        if (S_ISREG(e.st.st_mode)) c.size = static_cast<uint64_t>(e.st.st_size);
      }
      if (d.changes.size() >= max_changes) {
        d.truncated = true;
        return d;
      }
      d.changes.push_back(std::move(c));
    }
    if (!walk.error.empty()) {
      d.error = walk.error;
      return d;
    }
  }
  return d;
}

struct LayerTarball::State {
  std::vector<LayerSource> layers;
  size_t layer = 0;
  std::unique_ptr<UpperWalk> walk;
  std::string raw;  // tar bytes not yet compressed
  int file = -1;
  uint64_t file_left = 0, file_size = 0;
  bool input_done = false, finished = false;
  z_stream z{};
  bool z_ready = false;
  ~State() {
    if (file >= 0) close(file);
    if (z_ready) deflateEnd(&z);
  }
};

LayerTarball::LayerTarball(std::vector<LayerSource> layers) : state_(std::make_unique<State>()) {
  state_->layers = std::move(layers);
  // Level 1: a layer is mostly written once and read once; speed matters more.
  if (deflateInit2(&state_->z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK) state_->z_ready = true;
  else error_ = "zlib: cannot initialise";
}

LayerTarball::~LayerTarball() = default;

bool LayerTarball::next(std::string& out, size_t budget) {
  State& s = *state_;
  if (error_ || s.finished) return false;
  constexpr size_t kRawChunk = 256 * 1024;
  while (out.size() < budget && !s.finished) {
    // More tar bytes, up to a chunk.
    while (!s.input_done && s.raw.size() < kRawChunk) {
      if (s.file >= 0) {
        size_t want = static_cast<size_t>(std::min<uint64_t>(s.file_left, kRawChunk));
        size_t at = s.raw.size();
        s.raw.resize(at + want);
        ssize_t n = want ? read(s.file, s.raw.data() + at, want) : 0;
        if (n < 0) {
          error_ = std::string("read: ") + strerror(errno);
          return false;
        }
        if (n == 0 && want) {
          // Shrunk since its header was written: the declared size is kept.
          memset(s.raw.data() + at, 0, want);
          n = static_cast<ssize_t>(want);
        }
        s.raw.resize(at + static_cast<size_t>(n));
        s.file_left -= static_cast<uint64_t>(n);
        if (s.file_left == 0) {
          close(s.file);
          s.file = -1;
          pad_block(s.raw);
        }
        continue;
      }
      if (!s.walk) {
        if (s.layer >= s.layers.size()) {
          s.raw.append(1024, '\0');  // the end of the archive
          s.input_done = true;
          break;
        }
        s.walk = std::make_unique<UpperWalk>(s.layers[s.layer].upper);
      }
      UpperWalk::Entry e;
      if (!s.walk->next(e)) {
        if (!s.walk->error.empty()) {
          error_ = s.walk->error;
          return false;
        }
        s.walk.reset();
        ++s.layer;
        continue;
      }
      std::string name = inside_path(s.layers[s.layer].target, e.rel).substr(1);
      ++entries_;
      if (e.whiteout) {
        size_t slash = name.rfind('/');
        std::string wh = slash == std::string::npos ? ".wh." + name : name.substr(0, slash + 1) + ".wh." + name.substr(slash + 1);
        struct stat st = e.st;
        st.st_mode = S_IFREG | 0644;
        write_header(s.raw, wh, '0', st, 0);
      } else if (S_ISDIR(e.st.st_mode)) {
        write_header(s.raw, name + "/", '5', e.st, 0);
        if (e.opaque) {
          struct stat st = e.st;
          st.st_mode = S_IFREG | 0644;
          write_header(s.raw, name + "/.wh..wh..opq", '0', st, 0);
        }
      } else if (S_ISLNK(e.st.st_mode)) {
        char target[4096];
        ssize_t n = readlinkat(e.parent, e.name.c_str(), target, sizeof target - 1);
        if (n < 0) continue;
        write_header(s.raw, name, '2', e.st, 0, std::string(target, static_cast<size_t>(n)));
      } else if (S_ISREG(e.st.st_mode)) {
        int fd = openat(e.parent, e.name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
          if (errno == ENOENT) continue;
          error_ = "open " + name + ": " + strerror(errno);
          return false;
        }
        write_header(s.raw, name, '0', e.st, static_cast<uint64_t>(e.st.st_size));
        s.file = fd;
        s.file_left = s.file_size = static_cast<uint64_t>(e.st.st_size);
        if (s.file_left == 0) {
          close(s.file);
          s.file = -1;
        }
      } else {
        char type = S_ISCHR(e.st.st_mode) ? '3' : S_ISBLK(e.st.st_mode) ? '4' : S_ISFIFO(e.st.st_mode) ? '6' : 0;
        if (type) write_header(s.raw, name, type, e.st, 0);  // sockets have no tar form
      }
    }
    // Compress what is there.
    s.z.next_in = reinterpret_cast<Bytef*>(s.raw.data());
    s.z.avail_in = static_cast<uInt>(s.raw.size());
    int flush = s.input_done ? Z_FINISH : Z_NO_FLUSH;
    do {
      size_t at = out.size();
      out.resize(at + 64 * 1024);
      s.z.next_out = reinterpret_cast<Bytef*>(out.data() + at);
      s.z.avail_out = 64 * 1024;
      int rc = deflate(&s.z, flush);
      out.resize(out.size() - s.z.avail_out);
      if (rc == Z_STREAM_END) {
        s.finished = true;
        break;
      }
      if (rc != Z_OK && rc != Z_BUF_ERROR) {
        error_ = "zlib: deflate failed";
        return false;
      }
    } while (s.z.avail_out == 0 || (flush == Z_FINISH && !s.finished));
    s.raw.erase(0, s.raw.size() - s.z.avail_in);
  }
  return !s.finished;
}

}  // namespace execd::fs
