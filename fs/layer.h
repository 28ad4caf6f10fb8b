// fs/layer: an overlay mount's upper directory read as a layer, the way
// container images describe one: what changed over the lower directory
// (added, modified, deleted, replaced directories), and the upper itself as
// a gzip'd tar in the OCI image layer format (a deletion is an empty file
// `.wh.<name>`, a directory that hides the lower's contents holds
// `.wh..wh..opq`). Both walk without following symlinks, in path order, and
// block: run them on the threadpool. The tarball comes out a bounded piece
// at a time, so a slow client holds no thread and no growing buffer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace execd::fs {

struct LayerSource {
  std::string target;  // where the overlay is mounted (also its lower directory on the host)
  std::string upper;   // its upper directory on the host
};

struct LayerChange {
  std::string path;    // as seen inside (target + relative path)
  std::string change;  // added | modified | deleted | replaced (an opaque directory)
  std::string type;    // file | directory | symlink | other
  uint64_t size = 0;
};

struct LayerDiff {
  std::vector<LayerChange> changes;
  bool truncated = false;  // more than `max_changes`
  std::optional<std::string> error;
};

// Every change, up to `max_changes`. A directory that only appears in the
// upper because something beneath it changed is not a change of its own.
LayerDiff diff_layers(const std::vector<LayerSource>& layers, size_t max_changes);

class LayerTarball {
 public:
  explicit LayerTarball(std::vector<LayerSource> layers);
  ~LayerTarball();
  LayerTarball(const LayerTarball&) = delete;
  LayerTarball& operator=(const LayerTarball&) = delete;

  // Appends about `budget` bytes of the .tar.gz to `out` (fewer at the end);
  // false once everything is out (or an error stopped it: see error()).
  bool next(std::string& out, size_t budget);
  const std::optional<std::string>& error() const { return error_; }
  uint64_t entries() const { return entries_; }

 private:
  struct State;
  std::unique_ptr<State> state_;
  std::optional<std::string> error_;
  uint64_t entries_ = 0;
};

}  // namespace execd::fs
