// fs/env_file: see header.
#include "fs/env_file.h"

namespace execd::fs {
namespace {

bool blank(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  return s;
}

void expand_into(std::string_view run, const EnvLookup& lookup, std::string& out) {
  std::string expanded, error;
  expand_vars(run, lookup, expanded, error, /*allow_undefined=*/true);
  out += expanded;
}

// The inside of a double-quoted value: escapes are literal, the runs
// between them are expanded.
std::string double_quoted(std::string_view in, const EnvLookup& lookup) {
  std::string out;
  size_t run = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '\\' || i + 1 == in.size()) continue;
    expand_into(in.substr(run, i - run), lookup, out);
    char c = in[++i];
    out += c == 'n' ? '\n' : c == 'r' ? '\r' : c == 't' ? '\t' : c;
    run = i + 1;
  }
  expand_into(in.substr(run), lookup, out);
  return out;
}

// A quoted value's closing quote: the last unescaped `q` (for single quotes,
// simply the last one).
bool closed_by(std::string_view v, char q) {
  if (v.size() < 2 || v.front() != q || v.back() != q) return false;
  if (q == '\'') return true;
  size_t backslashes = 0;
  for (size_t i = v.size() - 1; i > 1 && v[i - 1] == '\\'; --i) ++backslashes;
  return backslashes % 2 == 0;
}

}  // namespace

bool parse_env_line(std::string_view line, const EnvLookup& lookup, std::string& key, std::string& value) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::string_view rest = trim(line);
  if (rest.empty() || rest.front() == '#') return false;
  if (rest.substr(0, 7) == "export " || rest.substr(0, 7) == "export\t") rest = trim(rest.substr(7));
  size_t eq = rest.find('=');
  if (eq == std::string_view::npos) return false;
  std::string_view k = trim(rest.substr(0, eq));
  if (k.empty()) return false;
  key.assign(k);
  // Verbatim after '=' (leading blanks included), as before quoting existed.
  std::string_view raw = rest.substr(eq + 1);
  std::string_view quoted = trim(raw);
  value.clear();
  if (closed_by(quoted, '\'')) {
    value.assign(quoted.substr(1, quoted.size() - 2));
  } else if (closed_by(quoted, '"')) {
    value = double_quoted(quoted.substr(1, quoted.size() - 2), lookup);
  } else {
    expand_into(raw, lookup, value);
  }
  return true;
}

}  // namespace execd::fs
