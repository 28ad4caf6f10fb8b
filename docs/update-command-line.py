#!/usr/bin/env python3
"""Rewrites the generated part of docs/command-line.md with what
`EXECD --help-markdown` prints (execd's flag table, execd/config_flags.cc);
the prose around it stays. `make docs` runs it;
tests/integration/test_bad_input.py fails while the two differ."""

import subprocess
import sys
from pathlib import Path

BEGIN = "<!-- Written by `execd --help-markdown`"
END = "<!-- End of the part `execd --help-markdown` writes. -->\n"


def main():
    execd = sys.argv[1] if len(sys.argv) > 1 else "build/execd"
    doc = Path(__file__).resolve().parent / "command-line.md"
    part = subprocess.run([execd, "--help-markdown"], check=True, capture_output=True, text=True).stdout
    text = doc.read_text()
    start = text.index(BEGIN)
    end = text.index(END, start) + len(END)
    doc.write_text(text[:start] + part + text[end:])


if __name__ == "__main__":
    main()
