// execd/config_usage: --help and --help-markdown, both written from the flag
// table (execd/config_flags), so neither can list a flag the parser does not
// take, or miss one it does.
#include <string>
#include <string_view>

#include "execd/config.h"
#include "execd/config_flags.h"

namespace execd {

namespace {

using config_flags::EnvUse;
using config_flags::Flag;
using config_flags::FlagGroup;

// What holds for every flag; both renderers start with it.
constexpr std::string_view kSyntax =
    "Flags as in Go: `-port 8080`, `--port 8080`, `-port=8080` or `--port=8080`. A switch is `-init` or "
    "`-init=BOOL` (true, false, 1, 0, t, f), never `-init false`; `--` ends the flags (what follows is the "
    "entrypoint of `--init`). Numbers take Go's syntax (`0x1F`, `0o17`, `1_000`); durations (D) too (`1h30m`, "
    "`1.5s`, `300ms`, `250us`) or a bare number of milliseconds. A variable named beside a flag is read when "
    "the flag is not given, unless its row says otherwise. An unknown flag or a bad value exits with status 2 and a one-line reason.";

std::string markdown_cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += "\\|";
    else if (c == '<') out += "&lt;";
    else out += c;
  }
  return out;
}

std::string flag_label(const Flag& f) {
  if (f.name.empty()) return "env " + f.env;
  std::string label = "--" + f.name;
  if (!f.alias.empty()) label += ", -" + f.alias;
  if (!f.value_name.empty()) label += " " + f.value_name;
  return label;
}

// The flag's variable and how it is used, for --help ("" for a variable
// with no flag: it is the label).
std::string env_note(const Flag& f) {
  if (f.env.empty() || f.name.empty()) return "";
  return f.env_use == EnvUse::turns_on ? f.env + "=1 turns it on" : f.env;
}

// The same as a markdown cell.
std::string env_cell(const Flag& f) {
  if (f.env.empty()) return "";
  return "`" + f.env + "`" + (f.env_use == EnvUse::turns_on ? " (a true value turns it on)" : "");
}

// A value in code style; prose ("execd's own cgroup") as it is.
std::string default_cell(const std::string& def) {
  if (def.empty()) return "";
  return def.find(' ') == std::string::npos ? "`" + def + "`" : markdown_cell(def);
}

std::string meaning(const Flag& f) {
  return f.ignored_because.empty() ? f.help : f.help + "; ignored: " + f.ignored_because;
}

// Appends `text` wrapped at `width` columns: the first line continues what
// `out` ends with (at column `column`), the others start with `indent`.
void append_wrapped(std::string& out, size_t column, std::string_view text, size_t indent, size_t width) {
  size_t at = 0;
  bool line_empty = true;
  while (at < text.size()) {
    size_t end = text.find(' ', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view word = text.substr(at, end - at);
    if (!line_empty && column + 1 + word.size() > width) {
      out += "\n" + std::string(indent, ' ');
      column = indent;
      line_empty = true;
    }
    if (!line_empty) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    line_empty = false;
    at = end + 1;
  }
  out += '\n';
}

}  // namespace

std::string usage_text() {
  constexpr size_t kLabelColumns = 34, kWidth = 100;
  std::string out = "usage: execd [flags] [--init -- CMD ARGS...]\n";
  std::string syntax;
  for (char c : kSyntax)
    if (c != '`') syntax += c;
  append_wrapped(out, 0, syntax, 0, kWidth);
  for (const FlagGroup& group : config_flags::flag_table()) {
    out += "\n" + group.title + ":\n";
    for (const Flag& f : group.flags) {
      std::string label = "  " + flag_label(f);
      std::string text = meaning(f);
      std::string def = config_flags::default_of(f), env = env_note(f);
      if (!def.empty() || !env.empty())
        text += " (" + (def.empty() ? "" : "default " + def) + (def.empty() || env.empty() ? "" : "; ") +
                (env.empty() ? "" : "env " + env) + ")";
      out += label;
      size_t column = label.size();
      if (column + 1 >= kLabelColumns) {  // a long label: the text starts below it
        out += "\n";
        column = 0;
      }
      out += std::string(kLabelColumns - column, ' ');
      append_wrapped(out, kLabelColumns, text, kLabelColumns, kWidth);
    }
  }
  return out;
}

std::string usage_markdown() {
  std::string out =
      "<!-- Written by `execd --help-markdown` from execd's flag table (execd/config_flags.cc): edit the table, "
      "not this part. `make docs` rewrites it; tests/integration/test_bad_input.py fails when it differs from "
      "the binary's. -->\n\n";
  out += std::string(kSyntax) + "\n";
  for (const FlagGroup& group : config_flags::flag_table()) {
    out += "\n## " + group.title + "\n\n| Flag | Default | Environment | Meaning |\n| --- | --- | --- | --- |\n";
    for (const Flag& f : group.flags) {
      out += "| " + (f.name.empty() ? "(none)" : "`" + flag_label(f) + "`") + " | " + default_cell(config_flags::default_of(f)) + " | " + env_cell(f) +
             " | " + markdown_cell(meaning(f)) + " |\n";
    }
  }
  out += "\n<!-- End of the part `execd --help-markdown` writes. -->\n";
  return out;
}

}  // namespace execd
