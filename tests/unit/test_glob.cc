// tests/unit/test_glob.cc — doublestar glob matching and validation.
#include <doctest/doctest.h>

#include "fs/glob.h"

using execd::fs::glob_is_valid;
using execd::fs::glob_match;
using execd::fs::GlobPattern;

TEST_CASE("glob: star and question mark") {
  CHECK(glob_match("*.txt", "alpha.txt"));
  CHECK(glob_match("*.txt", ".hidden.txt"));
  CHECK(glob_match("*", ""));
  CHECK_FALSE(glob_match("*.txt", "alpha.txt.bak"));
  CHECK_FALSE(glob_match("*", "a/b"));
  CHECK(glob_match("a*b*c", "aXXbYYc"));
  CHECK(glob_match("a*b*c", "abc"));
  CHECK_FALSE(glob_match("a*b*c", "acb"));
  CHECK(glob_match("?.go", "x.go"));
  CHECK_FALSE(glob_match("?.go", ".go"));
  CHECK(glob_match("?", "\xE6\xB5\x8B"));  // one code point, three bytes
  CHECK_FALSE(glob_match("??", "\xE6\xB5\x8B"));
  CHECK_FALSE(glob_match("a?b", "a/b"));
  CHECK(glob_match("\xE6\xB5\x8B*", "\xE6\xB5\x8B\xE8\xAF\x95.txt"));
}

TEST_CASE("glob: no exponential backtracking") {
  std::string name(200, 'a');
  CHECK_FALSE(glob_match("*a*a*a*a*a*a*a*a*a*a*a*a*b", name));
}

TEST_CASE("glob: character classes") {
  CHECK(glob_match("[abc].txt", "b.txt"));
  CHECK_FALSE(glob_match("[abc].txt", "d.txt"));
  CHECK(glob_match("[a-c]x", "cx"));
  CHECK_FALSE(glob_match("[a-c]x", "dx"));
  CHECK(glob_match("[!a-c]x", "dx"));
  CHECK(glob_match("[^a-c]x", "dx"));
  CHECK_FALSE(glob_match("[^a-c]x", "ax"));
  CHECK(glob_match("[\\]]", "]"));
  CHECK(glob_match("[\\-]", "-"));
  CHECK(glob_match("[\xCE\xB1-\xCF\x89]", "\xCE\xB2"));  // Greek alpha..omega, code points
  CHECK_FALSE(glob_match("[!x]", "/"));
}

TEST_CASE("glob: braces") {
  CHECK(glob_match("*.{go,rs}", "main.go"));
  CHECK(glob_match("*.{go,rs}", "main.rs"));
  CHECK_FALSE(glob_match("*.{go,rs}", "main.c"));
  CHECK(glob_match("{a,b{c,d}}x", "bdx"));
  CHECK(glob_match("{a,b{c,d}}x", "ax"));
  CHECK_FALSE(glob_match("{a,b{c,d}}x", "bx"));
  CHECK(glob_match("x{,y}", "x"));
  CHECK(glob_match("{[}],z}", "}"));  // a class may hold a brace
  CHECK(glob_match("{src/*.go,*.md}", "src/a.go"));
  CHECK(glob_match("{src/*.go,*.md}", "README.md"));
}

TEST_CASE("glob: escapes") {
  CHECK(glob_match("\\*", "*"));
  CHECK_FALSE(glob_match("\\*", "a"));
  CHECK(glob_match("a\\{b", "a{b"));
  CHECK(glob_match("\\[x]", "[x]"));
  CHECK(glob_match("a\\,b", "a,b"));
}

TEST_CASE("glob: doublestar") {
  CHECK(glob_match("**", "anything"));
  CHECK(glob_match("**", "a/b/c"));
  CHECK(glob_match("**/*.txt", "x.txt"));
  CHECK(glob_match("**/*.txt", "a/b/x.txt"));
  CHECK_FALSE(glob_match("**/*.txt", "a/b/x.go"));
  CHECK(glob_match("src/**/*.go", "src/main.go"));
  CHECK(glob_match("src/**/*.go", "src/a/b/main.go"));
  CHECK_FALSE(glob_match("src/**/*.go", "lib/src/main.go"));
  CHECK(glob_match("a/**", "a/b/c"));
  CHECK(glob_match("a/**", "a"));
  CHECK(glob_match("a/**/**/b", "a/b"));
  CHECK(glob_match("a**b", "aXXb"));       // not a whole segment: acts as '*'
  CHECK_FALSE(glob_match("a**b", "a/b"));
  CHECK(glob_match("src/*.go", "src/x.go"));
  CHECK_FALSE(glob_match("src/*.go", "src/sub/x.go"));
}

TEST_CASE("glob: validity") {
  std::string why;
  CHECK(glob_is_valid("*.{go,rs}"));
  CHECK(glob_is_valid("[a-z]?\\*"));
  CHECK_FALSE(glob_is_valid("[abc", &why));
  CHECK_FALSE(why.empty());
  CHECK_FALSE(glob_is_valid("[]"));
  CHECK_FALSE(glob_is_valid("[z-a]"));
  CHECK_FALSE(glob_is_valid("[a-]"));
  CHECK_FALSE(glob_is_valid("abc\\"));
  CHECK_FALSE(glob_is_valid("{a,b"));
  CHECK_FALSE(glob_is_valid("a}"));
  CHECK_FALSE(glob_is_valid("[a/b]"));
  CHECK_FALSE(glob_is_valid("{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}{o,p}{q,r}{s,t}{u,v}"));  // 2048 alternatives
  CHECK_FALSE(glob_match("[abc", "a"));
}

TEST_CASE("glob: search semantics — basename vs relative path") {
  auto basename_pattern = GlobPattern::compile("*.txt");
  REQUIRE(basename_pattern);
  CHECK_FALSE(basename_pattern->has_directory_part());
  CHECK(basename_pattern->matches_entry("deep/dir/a.txt", "a.txt"));

  auto path_pattern = GlobPattern::compile("deep/*/a.txt");
  REQUIRE(path_pattern);
  CHECK(path_pattern->has_directory_part());
  CHECK(path_pattern->matches_entry("deep/dir/a.txt", "a.txt"));
  CHECK_FALSE(path_pattern->matches_entry("other/dir/a.txt", "a.txt"));

  auto escaped_slash = GlobPattern::compile("{a,b/c}");
  REQUIRE(escaped_slash);
  CHECK(escaped_slash->has_directory_part());
}
