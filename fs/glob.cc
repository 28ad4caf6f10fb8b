// fs/glob.cc — glob compilation (brace expansion + syntax check) and matching.
//
// Braces are expanded at compile time into brace-free alternatives; each
// alternative is split into '/' segments. A segment is matched with the
// classic single-star backtracking loop (O(n*m), no exponential blow-up), and
// "**" segments with a memoised segment-level search.
#include "fs/glob.h"

#include <cstdint>

namespace execd::fs {
namespace {

constexpr size_t kMaxAlternatives = 1024;

// Length of the UTF-8 sequence starting at s[i] (1 for invalid bytes, so any
// byte string can be matched).
size_t utf8_length(std::string_view s, size_t i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
  if (i + len > s.size()) return 1;
  for (size_t k = 1; k < len; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  }
  return len;
}

uint32_t decode_code_point(std::string_view s, size_t i, size_t len) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  if (len == 1) return c;
  uint32_t cp = c & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

// Reads one (possibly escaped) class character at pattern[i]; advances i.
// Returns false on a syntax error.
bool read_class_char(std::string_view pattern, size_t& i, uint32_t& out, std::string* why) {
  if (i >= pattern.size()) {
    if (why) *why = "unterminated character class";
    return false;
  }
  if (pattern[i] == '\\') {
    ++i;
    if (i >= pattern.size()) {
      if (why) *why = "trailing backslash in character class";
      return false;
    }
  } else if (pattern[i] == '-' || pattern[i] == ']') {
    if (why) *why = "unescaped '" + std::string(1, pattern[i]) + "' in character class";
    return false;
  }
  size_t len = utf8_length(pattern, i);
  out = decode_code_point(pattern, i, len);
  i += len;
  return true;
}

// Parses the class starting at pattern[i] == '['. Sets `end` to the index just
// after ']'. When `subject` is given, reports whether it matches.
bool parse_class(std::string_view pattern, size_t i, size_t& end, std::optional<uint32_t> subject,
                 bool& matched, std::string* why) {
  ++i;  // '['
  bool negated = false;
  if (i < pattern.size() && (pattern[i] == '!' || pattern[i] == '^')) {
    negated = true;
    ++i;
  }
  bool any = false;
  bool first = true;
  for (;;) {
    if (i >= pattern.size()) {
      if (why) *why = "unterminated character class";
      return false;
    }
    if (pattern[i] == ']' && !first) {
      ++i;
      break;
    }
    first = false;
    if (pattern[i] == '/') {
      if (why) *why = "'/' inside a character class";
      return false;
    }
    uint32_t lo = 0;
    if (!read_class_char(pattern, i, lo, why)) return false;
    uint32_t hi = lo;
    if (i < pattern.size() && pattern[i] == '-') {
      ++i;
      if (!read_class_char(pattern, i, hi, why)) return false;
      if (hi < lo) {
        if (why) *why = "character class range is reversed";
        return false;
      }
    }
    if (subject && *subject >= lo && *subject <= hi) any = true;
  }
  end = i;
  matched = any != negated;
  return true;
}

// Validates a brace-free segment (escapes and classes).
bool check_segment(std::string_view seg, std::string* why) {
  for (size_t i = 0; i < seg.size();) {
    if (seg[i] == '\\') {
      if (i + 1 >= seg.size()) {
        if (why) *why = "trailing backslash";
        return false;
      }
      i += 1 + utf8_length(seg, i + 1);
    } else if (seg[i] == '[') {
      size_t end = 0;
      bool matched = false;
      if (!parse_class(seg, i, end, std::nullopt, matched, why)) return false;
      i = end;
    } else {
      ++i;
    }
  }
  return true;
}

// Matches one brace-free, '/'-free pattern segment against one name.
bool match_segment(std::string_view pat, std::string_view name) {
  size_t p = 0, n = 0;
  size_t star_p = std::string_view::npos, star_n = 0;
  while (n < name.size()) {
    if (p < pat.size()) {
      char c = pat[p];
      if (c == '*') {
        while (p < pat.size() && pat[p] == '*') ++p;
        star_p = p;
        star_n = n;
        continue;
      }
      size_t name_len = utf8_length(name, n);
      if (c == '?') {
        p += 1;
        n += name_len;
        continue;
      }
      if (c == '[') {
        size_t end = 0;
        bool matched = false;
        parse_class(pat, p, end, decode_code_point(name, n, name_len), matched, nullptr);
        if (matched) {
          p = end;
          n += name_len;
          continue;
        }
      } else {
        size_t lit = p;
        if (c == '\\') lit = p + 1;
        size_t lit_len = utf8_length(pat, lit);
        if (name.compare(n, name_len, pat.substr(lit, lit_len)) == 0) {
          p = lit + lit_len;
          n += name_len;
          continue;
        }
      }
    }
    // Mismatch: let the last '*' swallow one more code point and retry.
    if (star_p == std::string_view::npos) return false;
    star_n += utf8_length(name, star_n);
    n = star_n;
    p = star_p;
  }
  while (p < pat.size() && pat[p] == '*') ++p;
  return p == pat.size();
}

// Finds the '}' matching the '{' at s[open]; npos if unbalanced.
size_t matching_brace(std::string_view s, size_t open) {
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    char c = s[i];
    if (c == '\\') {
      ++i;
    } else if (c == '[') {
      // Skip a class so that "[}]" does not close a brace.
      size_t end = 0;
      bool matched = false;
      if (parse_class(s, i, end, std::nullopt, matched, nullptr)) i = end - 1;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}') {
      if (--depth == 0) return i;
    }
  }
  return std::string_view::npos;
}

// Splits the body of a brace group at top-level commas.
std::vector<std::string_view> split_alternatives(std::string_view body) {
  std::vector<std::string_view> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c == '\\') {
      ++i;
    } else if (c == '[') {
      size_t end = 0;
      bool matched = false;
      if (parse_class(body, i, end, std::nullopt, matched, nullptr)) i = end - 1;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}') {
      --depth;
    } else if (c == ',' && depth == 0) {
      out.push_back(body.substr(start, i - start));
      start = i + 1;
    }
  }
  out.push_back(body.substr(start));
  return out;
}

// Expands the first top-level brace group of `pattern` recursively.
bool expand_braces(const std::string& pattern, std::vector<std::string>& out, std::string* why) {
  size_t open = std::string::npos;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\') {
      ++i;
    } else if (c == '[') {
      size_t end = 0;
      bool matched = false;
      if (!parse_class(pattern, i, end, std::nullopt, matched, why)) return false;
      i = end - 1;
    } else if (c == '{') {
      open = i;
      break;
    } else if (c == '}') {
      if (why) *why = "unmatched '}'";
      return false;
    }
  }
  if (open == std::string::npos) {
    if (out.size() >= kMaxAlternatives) {
      if (why) *why = "too many brace alternatives";
      return false;
    }
    out.push_back(pattern);
    return true;
  }
  size_t close = matching_brace(pattern, open);
  if (close == std::string::npos) {
    if (why) *why = "unterminated '{'";
    return false;
  }
  std::string_view body(pattern.data() + open + 1, close - open - 1);
  std::string prefix = pattern.substr(0, open);
  std::string suffix = pattern.substr(close + 1);
  for (std::string_view alternative : split_alternatives(body)) {
    if (!expand_braces(prefix + std::string(alternative) + suffix, out, why)) return false;
  }
  return true;
}

// Splits at unescaped '/' (classes cannot contain '/', checked separately).
std::vector<std::string> split_segments(std::string_view pattern) {
  std::vector<std::string> out(1);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      out.back() += pattern[i];
      out.back() += pattern[++i];
    } else if (pattern[i] == '/') {
      out.emplace_back();
    } else {
      out.back() += pattern[i];
    }
  }
  return out;
}

std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) {
      out.push_back(path.substr(start));
      return out;
    }
    out.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
}

}  // namespace

std::optional<GlobPattern> GlobPattern::compile(std::string_view pattern, std::string* why) {
  std::vector<std::string> expanded;
  if (!expand_braces(std::string(pattern), expanded, why)) return std::nullopt;

  GlobPattern glob;
  for (const std::string& alternative : expanded) {
    Alternative segments;
    for (std::string& text : split_segments(alternative)) {
      if (!check_segment(text, why)) return std::nullopt;
      bool any_depth = text == "**";
      // Consecutive "**" segments are equivalent to one.
      if (any_depth && !segments.empty() && segments.back().any_depth) continue;
      segments.push_back(Segment{std::move(text), any_depth});
    }
    if (segments.size() > 1) glob.has_directory_part_ = true;
    glob.alternatives_.push_back(std::move(segments));
  }
  return glob;
}

bool GlobPattern::matches(std::string_view path) const {
  std::vector<std::string_view> names = split_path(path);
  for (const Alternative& segments : alternatives_) {
    const size_t pattern_count = segments.size();
    const size_t name_count = names.size();
    // reachable[pi][ni]: segments[pi..] can match names[ni..]. Filled backwards.
    std::vector<char> table((pattern_count + 1) * (name_count + 1), 0);
    auto at = [&](size_t pi, size_t ni) -> char& { return table[pi * (name_count + 1) + ni]; };
    at(pattern_count, name_count) = 1;
    for (size_t pi = pattern_count; pi-- > 0;) {
      for (size_t ni = name_count + 1; ni-- > 0;) {
        const Segment& seg = segments[pi];
        bool ok;
        if (seg.any_depth) {
          ok = at(pi + 1, ni) || (ni < name_count && at(pi, ni + 1));
        } else {
          ok = ni < name_count && at(pi + 1, ni + 1) && match_segment(seg.text, names[ni]);
        }
        at(pi, ni) = ok;
      }
    }
    if (at(0, 0)) return true;
  }
  return false;
}

bool glob_is_valid(std::string_view pattern, std::string* why) {
  return GlobPattern::compile(pattern, why).has_value();
}

bool glob_match(std::string_view pattern, std::string_view path) {
  auto glob = GlobPattern::compile(pattern);
  return glob && glob->matches(path);
}

}  // namespace execd::fs
