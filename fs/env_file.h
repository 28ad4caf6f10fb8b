// fs/env_file: the EXECD_ENVS file's format, as text to (key, value) pairs.
// One KEY=VALUE per line; blank lines, '#' comments and lines without a key
// are skipped; an `export ` prefix is allowed. A value is taken verbatim
// with `$NAME`/`${NAME}` expanded, or, quoted as a whole, literal between
// single quotes, or between double quotes with \\ \" \n \r \t \$ escapes and
// the unescaped `$` references expanded (the two forms the OpenSandbox SDK's
// set_env appends). References see execd's environment and the file's own
// earlier entries; an undefined one is empty. Pure string work.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fs/expand.h"

namespace execd::fs {

// Calls `set(key, value)` for each entry in order (a later one wins);
// `lookup` must see what `set` stored.
template <class Set>
void parse_env_file(std::string_view text, const EnvLookup& lookup, Set set);

// One line; false when it holds no entry.
bool parse_env_line(std::string_view line, const EnvLookup& lookup, std::string& key, std::string& value);

template <class Set>
void parse_env_file(std::string_view text, const EnvLookup& lookup, Set set) {
  std::string key, value;
  for (size_t at = 0, end; at < text.size(); at = end + 1) {
    end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    if (parse_env_line(text.substr(at, end - at), lookup, key, value)) set(key, value);
  }
}

}  // namespace execd::fs
