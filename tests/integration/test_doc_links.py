"""Relative links in the project's Markdown (README.md, docs/, tests/,
image/) lead somewhere: the file exists, and a #fragment names a heading of
it, spelled as GitHub makes a heading's anchor. The README sends readers to
docs/ and the docs to each other; a renamed heading or a moved file breaks
such a link silently, and this finds it. Needs no daemon."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP_DIRS = {".git", ".venv", "node_modules", "third_party"}

LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def markdown_files(root):
    for path in sorted(root.rglob("*.md")):
        rel = path.relative_to(root).parts
        if any(p in SKIP_DIRS or p.startswith("build") for p in rel[:-1]):
            continue
        yield path


def prose_lines(text, keep_code=False):
    """The lines outside fenced code blocks, with inline code blanked out
    (a link inside backticks is an example, not a link) unless keep_code."""
    fence = None
    for line in text.split("\n"):
        stripped = line.lstrip()
        marker = re.match(r"(`{3,}|~{3,})", stripped)
        if marker:
            if fence is None:
                fence = marker.group(1)[0] * len(marker.group(1))
                continue
            if stripped.startswith(fence):
                fence = None
                continue
        if fence is None:
            yield line if keep_code else re.sub(r"`[^`]*`", "``", line)


def slug(heading):
    """GitHub's anchor for a heading: lower case, markup and punctuation
    other than '-' and '_' dropped, spaces turned into '-'."""
    text = re.sub(r"<[^>]+>", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text):
    seen = {}
    out = set()
    for line in prose_lines(text, keep_code=True):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(root):
    problems = []
    cache = {}
    for path in markdown_files(root):
        text = path.read_text()
        for lineno, line in enumerate(prose_lines(text), 1):
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, ...
                    continue
                file_part, _, fragment = target.partition("#")
                dest = (path.parent / file_part).resolve() if file_part else path
                where = f"{path.relative_to(root)}: {target}"
                if not dest.exists():
                    problems.append(f"{where}: no such file")
                    continue
                if fragment and dest.suffix == ".md":
                    if dest not in cache:
                        cache[dest] = anchors(dest.read_text())
                    if fragment not in cache[dest]:
                        problems.append(f"{where}: no heading with that anchor")
    return problems


def test_relative_links_and_anchors_resolve():
    problems = broken_links(ROOT)
    assert not problems, "broken links in the project's Markdown:\n" + "\n".join(problems)


def test_readme_points_at_every_doc():
    readme = (ROOT / "README.md").read_text()
    for doc in sorted((ROOT / "docs").glob("*.md")):
        assert f"](docs/{doc.name})" in readme, f"README.md's 'Where to read' does not list docs/{doc.name}"


def test_the_checker_finds_what_is_broken(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(
        "# A\n\n## Two words: `code`\n\n## Two words: `code`\n\n```\n[not a link](gone.md)\n```\n")
    (tmp_path / "README.md").write_text(
        "[ok](docs/a.md#two-words-code) [second](docs/a.md#two-words-code-1)\n"
        "[here](#top) [web](https://example.com/x) `[code](nowhere.md)`\n"
        "[missing](docs/b.md) [bad anchor](docs/a.md#three-words)\n\n# Top\n")
    assert broken_links(tmp_path) == [
        "README.md: docs/b.md: no such file",
        "README.md: docs/a.md#three-words: no heading with that anchor",
    ]
