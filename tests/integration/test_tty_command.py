"""POST /command with "tty": true: the command runs on a PTY of the requested
size, and the merged terminal output streams as `stdout` in both framings."""

from __future__ import annotations


def test_tty_compat_framing(execd):
    r = execd.run("[ -t 0 ] && [ -t 1 ] && echo is-a-tty; stty size; echo to-err >&2; tput cols 2>/dev/null || true",
                  tty=True, rows=33, cols=111, envs={"TERM": "xterm"})
    assert r.status == 200
    out = r.texts("stdout")
    assert "is-a-tty" in out and "33 111" in out and "to-err" in out
    assert not r.texts("stderr")
    assert r.terminal["type"] == "execution_complete"


def test_tty_exact_framing_and_exit_code(execd):
    r = execd.run("printf 'a\\nb'; exit 3", tty=True, exact=True)
    assert r.status == 200
    assert r.stdout == b"a\r\nb" and r.stderr == b""
    assert r.terminal["exit_code"] == 3


def test_without_tty_nothing_is_a_terminal(execd):
    r = execd.run("[ -t 0 ] || [ -t 1 ] || echo no-tty")
    assert r.texts("stdout") == ["no-tty"]
