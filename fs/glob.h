// fs/glob.h — doublestar-dialect glob patterns for /files/search.
//
// Syntax: `*` any run of characters except '/', `?` one character (a UTF-8
// code point) except '/', `[abc]` `[a-z]` `[!x]` `[^x]` classes (never match
// '/'), `{a,b}` alternation (nestable, alternatives may contain '/'), `\x`
// literal x, and `**` as a whole path segment = zero or more segments
// (elsewhere `**` behaves like `*`). Matching is case-sensitive and `*`
// matches leading dots.
//
// How search applies it (see GlobPattern::matches_entry): a pattern containing
// '/' is matched against the path relative to the search root
// ("src/*.go", "**/test/*.py"); a pattern without '/' against the basename
// only, like the Go daemon ("*.txt" finds text files at every depth).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace execd::fs {

class GlobPattern {
 public:
  // Compiles `pattern`; on a malformed pattern (unclosed '[' or '{', trailing
  // '\', empty class, bad range, too many brace alternatives) returns nullopt
  // and, if `why` is given, a human-readable reason.
  static std::optional<GlobPattern> compile(std::string_view pattern, std::string* why = nullptr);

  // Matches the whole of `path` ('/'-separated, no leading '/').
  bool matches(std::string_view path) const;

  // True when the pattern contains an unescaped '/', i.e. it is meant for
  // relative paths rather than basenames.
  bool has_directory_part() const { return has_directory_part_; }

  // Search semantics: relative path if has_directory_part(), else basename.
  bool matches_entry(std::string_view relative_path, std::string_view basename) const {
    return matches(has_directory_part_ ? relative_path : basename);
  }

 private:
  struct Segment {
    std::string text;  // pattern text of one path segment, braces expanded
    bool any_depth;    // the segment is exactly "**"
  };
  using Alternative = std::vector<Segment>;

  std::vector<Alternative> alternatives_;
  bool has_directory_part_ = false;
};

// Convenience wrappers.
bool glob_is_valid(std::string_view pattern, std::string* why = nullptr);
bool glob_match(std::string_view pattern, std::string_view path);  // false if malformed

}  // namespace execd::fs
