"""E2B's Python SDK (PyPI `e2b`, unmodified, synchronous API) against
execd's envd listener (E2B_SANDBOX_URL pointing at `--envd-port`),
authorized as outside debug mode: a stand-in for E2B's API hands out
execd's token (e2b_support.ControlPlane). Every call the issue lists, and the output
compared byte for byte with what the OpenSandbox API streams for the same
command."""

from __future__ import annotations

import hashlib
import io
import os
import time

import httpx
import pytest
from e2b import AuthenticationException, CommandExitException, Sandbox, TimeoutException
from e2b.sandbox.commands.command_handle import PtySize
from e2b.sandbox.filesystem.filesystem import FileType, WriteEntry
from e2b.sandbox.filesystem.watch_handle import FilesystemEventType

from e2b_support import ControlPlane, control_plane, opensandbox_bytes, point_sdk_at, start_e2b
from execd_client import SLOW, pids_with_cmdline, process_alive, wait_until

# Output whose bytes the SDK must not change: a Markdown table with blank
# lines, a CR progress bar, a character split across writes, no final
# newline; and bytes that are not UTF-8 (the SDK decodes them with
# "replace": it must see exactly what that decoding of the real bytes gives).
EXACT_COMMANDS = {
    "markdown": r"printf '| a | b |\n|---|---|\n| 1 | 2 |\n\n\n| x | y |\n'; printf '\n\n  indented\n'",
    "progress": r"for i in 1 2 3 4; do printf '\r[%-4s] %d%%' $(printf '#%.0s' $(seq $i)) $((i*25)); sleep 0.01; done; echo",
    "split_char": r"printf 'euro \xe2\x82'; sleep 0.05; printf '\xac end'",
    "interleaved": r"for i in 1 2 3; do echo out$i; echo err$i >&2; done; printf 'no newline'",
    "binary": r"printf '\x00\x01\xff\xfe text \x80\xc3'; printf '\xa9\n'",
    "crlf": r"printf 'a\r\nb\r\n\r\n'",
}


@pytest.fixture
def sbx(execd_factory, monkeypatch):
    ex, url = start_e2b(execd_factory)
    point_sdk_at(monkeypatch, url)
    s = Sandbox.create()
    s.execd = ex
    return s


def containment(ex) -> str:
    return ex.request("GET", "/ping")[1].get("x-execd-containment", "")


def test_create_and_is_running(sbx):
    assert sbx.sandbox_id == ControlPlane.SANDBOX_ID
    assert sbx.is_running()


@pytest.mark.parametrize("name", sorted(EXACT_COMMANDS))
def test_output_byte_exact_like_opensandbox(sbx, name):
    cmd = EXACT_COMMANDS[name]
    want_out, want_err = opensandbox_bytes(sbx.execd, cmd)
    got_out, got_err = [], []
    r = sbx.commands.run(cmd, on_stdout=got_out.append, on_stderr=got_err.append)
    assert r.exit_code == 0
    assert r.stdout == want_out.decode("utf-8", "replace"), (r.stdout, want_out)
    assert r.stderr == want_err.decode("utf-8", "replace")
    assert "".join(got_out) == r.stdout and "".join(got_err) == r.stderr


def test_nonzero_exit_raises(sbx):
    with pytest.raises(CommandExitException) as info:
        sbx.commands.run("echo partial; echo oops >&2; exit 7")
    e = info.value
    assert e.exit_code == 7 and e.stdout == "partial\n" and e.stderr == "oops\n"
    assert e.error == "exit status 7"


def test_user_envs_cwd(sbx, tmp_path):
    r = sbx.commands.run("echo $FOO $BAR; pwd; id -un", envs={"FOO": "one", "BAR": "two words"}, cwd=str(tmp_path))
    assert r.stdout.splitlines() == ["one two words", str(tmp_path), "root"]
    r = sbx.commands.run("id -un; id -u; echo $HOME", user="nobody", cwd="/")
    assert r.stdout.splitlines()[:2] == ["nobody", "65534"]
    # A relative cwd is relative to the user's home, as in envd.
    r = sbx.commands.run("pwd", cwd=".", user="root")
    assert r.stdout.strip() == "/root"


def test_timeout_kills_the_command(sbx):
    marker = "sleep 4242"
    t0 = time.monotonic()
    with pytest.raises(TimeoutException):
        sbx.commands.run(f"{marker}; echo never", timeout=1)
    assert time.monotonic() - t0 < 10 * SLOW
    # envd ends the process at the call's deadline; so does execd.
    wait_until(lambda: not pids_with_cmdline(marker), 10 * SLOW, what="the timed-out command to be gone")


def test_background_wait_and_kill(sbx):
    h = sbx.commands.run("sleep 0.2; echo finished", background=True)
    assert h.pid > 0
    assert h.wait().stdout == "finished\n"
    h = sbx.commands.run("sleep 4343", background=True)
    assert any(p.pid == h.pid for p in sbx.commands.list())
    assert h.kill() is True
    with pytest.raises(CommandExitException) as info:
        h.wait()
    assert info.value.exit_code == -1 and info.value.error == "signal: killed"
    assert not pids_with_cmdline("sleep 4343")


def test_connect_gets_output_written_while_detached(sbx, tmp_path):
    # envd drops output nobody is attached for; execd keeps it for Connect.
    h = sbx.commands.run("for i in $(seq 1 20); do echo line $i; sleep 0.02; done; echo done >&2", background=True)
    pid = h.pid
    h.disconnect()
    wait_until(lambda: not any(p.pid == pid for p in sbx.commands.list()), 20 * SLOW, what="the command to finish")
    again = sbx.commands.connect(pid)
    r = again.wait()
    assert r.stdout == "".join(f"line {i}\n" for i in range(1, 21))
    assert r.stderr == "done\n"
    # And while it still runs: what came before the connect, then live.
    marker = tmp_path / "written"
    h = sbx.commands.run(f"echo before; touch {marker}; read x; echo after $x", background=True, stdin=True)
    h.disconnect()
    wait_until(marker.exists, 10 * SLOW, what="the first line to be written")
    c = sbx.commands.connect(h.pid)
    sbx.commands.send_stdin(h.pid, "now\n")
    assert c.wait().stdout == "before\nafter now\n"


def test_list_and_kill_reach_the_whole_cgroup(sbx):
    h = sbx.commands.run("sleep 4444 & sleep 4445 & echo started; wait", background=True)
    listed = {p.pid: p for p in sbx.commands.list()}
    assert h.pid in listed
    assert listed[h.pid].cmd == "/bin/bash" and "sleep 4444 & sleep 4445 & echo started; wait" in listed[h.pid].args
    wait_until(lambda: pids_with_cmdline("sleep 4444") and pids_with_cmdline("sleep 4445"), 10 * SLOW,
               what="the children")
    assert sbx.commands.kill(h.pid) is True
    wait_until(lambda: not pids_with_cmdline("sleep 444"), 10 * SLOW, what="every child to die with the shell")
    # Without cgroups the keeper reaps the tree, then reports: the run ends
    # (and leaves the list) a moment after the processes are gone.
    wait_until(lambda: h.pid not in {p.pid for p in sbx.commands.list()}, 10 * SLOW, what="the run to end")
    assert sbx.commands.kill(h.pid) is False  # nothing left: NOT_FOUND, as envd
    if containment(sbx.execd) == "process-group":
        pytest.skip("no cgroups: a setsid() child escapes the process group")
    # The shell exits at once and leaves a setsid() child: kill still reaches it.
    h = sbx.commands.run("setsid sleep 4446 &", background=True)
    h.wait()
    wait_until(lambda: pids_with_cmdline("sleep 4446"), 10 * SLOW, what="the orphan")
    assert sbx.commands.kill(h.pid) is True
    wait_until(lambda: not pids_with_cmdline("sleep 4446"), 10 * SLOW, what="the orphan to die")


def test_stdin_send_and_close(sbx):
    h = sbx.commands.run("cat; echo eof", background=True, stdin=True)
    sbx.commands.send_stdin(h.pid, "first\n")
    h.send_stdin(b"second \xff\n")
    sbx.commands.close_stdin(h.pid)
    r = h.wait()
    assert r.stdout == "first\nsecond \ufffd\neof\n"
    h = sbx.commands.run("wc -c", background=True, stdin=True)
    sbx.commands.stream_input(h.pid, [b"x" * 1000, "yz", b""])
    h.close_stdin()
    assert h.wait().stdout.strip() == "1002"


def test_pty_create_input_resize_kill(sbx):
    out = bytearray()
    p = sbx.pty.create(PtySize(rows=24, cols=80), envs={"PS1": "$ "})
    sbx.pty.send_stdin(p.pid, b"stty size\n")
    handle_events = iter(p)

    def saw(text):
        while text not in out:
            _, _, chunk = next(handle_events)
            if chunk:
                out.extend(chunk)
        return True

    assert saw(b"24 80")
    sbx.pty.resize(p.pid, PtySize(rows=33, cols=101))
    sbx.pty.send_stdin(p.pid, b"stty size; echo $TERM\n")
    assert saw(b"33 101") and saw(b"xterm-256color")
    assert sbx.pty.kill(p.pid) is True
    wait_until(lambda: not any(x.pid == p.pid for x in sbx.commands.list()), 10 * SLOW, what="the pty to end")


def test_files_read_write(sbx, tmp_path):
    d = tmp_path / "files"
    info = sbx.files.write(f"{d}/text.txt", "hello\n\nworld")
    assert (info.name, info.type, info.path) == ("text.txt", FileType.FILE, f"{d}/text.txt")
    binary = bytes(range(256)) * 41
    sbx.files.write(f"{d}/bin.dat", binary)
    sbx.files.write(f"{d}/from_file.txt", io.BytesIO(b"from a file object"))
    many = sbx.files.write_files([WriteEntry(path=f"{d}/m/one.txt", data="1"),
                                  WriteEntry(path=f"{d}/m/deep/two.bin", data=b"\x00\x02")])
    assert [w.path for w in many] == [f"{d}/m/one.txt", f"{d}/m/deep/two.bin"]
    assert sbx.files.read(f"{d}/text.txt") == "hello\n\nworld"
    assert bytes(sbx.files.read(f"{d}/bin.dat", format="bytes")) == binary
    assert b"".join(sbx.files.read(f"{d}/bin.dat", format="stream")) == binary
    assert (d / "from_file.txt").read_bytes() == b"from a file object"
    assert (d / "m" / "deep" / "two.bin").read_bytes() == b"\x00\x02"
    # What the SDK wrote is what the OpenSandbox download gives.
    st, _, body = sbx.execd.request("GET", f"/files/download?path={d}/bin.dat")
    assert st == 200 and hashlib.sha256(body).digest() == hashlib.sha256(binary).digest()


def test_files_metadata_as_user_e2b_xattrs(sbx, tmp_path):
    """files.write(metadata=...) keeps the map as the file's user.e2b.*
    xattrs (keys lower-cased), says so in the WriteInfo, and every later
    entry info (get_info, list, rename) reports them, also ones set outside
    the SDK; a new write without metadata drops them (the file is replaced)."""
    d = str(tmp_path)
    info = sbx.files.write(f"{d}/tagged.txt", "x", metadata={"Owner": "agent-7", "stage": "draft"})
    assert info.metadata == {"owner": "agent-7", "stage": "draft"}
    assert os.getxattr(f"{d}/tagged.txt", "user.e2b.owner") == b"agent-7"
    os.setxattr(f"{d}/tagged.txt", "user.e2b.outside", b"set by hand")
    os.setxattr(f"{d}/tagged.txt", "user.other", b"not e2b's")
    want = {"owner": "agent-7", "stage": "draft", "outside": "set by hand"}
    assert sbx.files.get_info(f"{d}/tagged.txt").metadata == want
    assert {e.name: e.metadata for e in sbx.files.list(d)}["tagged.txt"] == want
    assert sbx.files.rename(f"{d}/tagged.txt", f"{d}/moved.txt").metadata == want
    many = sbx.files.write_files([WriteEntry(path=f"{d}/a.txt", data="1"), WriteEntry(path=f"{d}/b.txt", data="2")],
                                 metadata={"batch": "1"})
    assert [w.metadata for w in many] == [{"batch": "1"}, {"batch": "1"}]
    assert sbx.files.get_info(f"{d}/b.txt").metadata == {"batch": "1"}
    sbx.files.write(f"{d}/moved.txt", "y")
    assert sbx.files.get_info(f"{d}/moved.txt").metadata is None
    # With a gzip body too: the metadata and the inflated content.
    assert sbx.files.write(f"{d}/gz.txt", "zipped " * 100, metadata={"k": "v"}, gzip=True).metadata == {"k": "v"}
    assert sbx.files.read(f"{d}/gz.txt") == "zipped " * 100
    assert sbx.files.get_info(f"{d}/gz.txt").metadata == {"k": "v"}


def test_files_list_exists_info_dirs(sbx, tmp_path):
    d = tmp_path / "tree"
    (d / "a" / "b" / "c").mkdir(parents=True)
    (d / "a" / "f1").write_text("x")
    (d / "a" / "b" / "f2").write_text("yy")
    (d / "link").symlink_to(d / "a" / "f1")
    one = sbx.files.list(str(d))
    assert sorted(e.name for e in one) == ["a", "link"]
    two = sbx.files.list(str(d), depth=2)
    assert sorted(e.path for e in two) == sorted(str(p) for p in [d / "a", d / "link", d / "a" / "b", d / "a" / "f1"])
    three = {e.path: e for e in sbx.files.list(str(d), depth=3)}
    assert str(d / "a" / "b" / "f2") in three and str(d / "a" / "b" / "c") in three
    assert three[str(d / "a")].type == FileType.DIR
    link = three[str(d / "link")]
    assert link.type == FileType.SYMLINK and link.symlink_target == str(d / "a" / "f1")
    assert sbx.files.exists(str(d / "a" / "f1")) and not sbx.files.exists(str(d / "nope"))
    info = sbx.files.get_info(str(d / "a" / "b" / "f2"))
    assert (info.name, info.size, info.type, info.owner) == ("f2", 2, FileType.FILE, "root")
    assert info.permissions.startswith("-rw") and info.mode == (d / "a" / "b" / "f2").stat().st_mode & 0o777
    assert sbx.files.make_dir(str(d / "new" / "nested")) is True
    assert sbx.files.make_dir(str(d / "new" / "nested")) is False
    moved = sbx.files.rename(str(d / "a" / "f1"), str(d / "moved" / "f1"))
    assert moved.path == str(d / "moved" / "f1") and (d / "moved" / "f1").read_text() == "x"
    sbx.files.remove(str(d / "a"))
    assert not (d / "a").exists()
    sbx.files.remove(str(d / "already-gone"))  # as envd: no error


def test_watch_dir_recursive(sbx, tmp_path):
    d = tmp_path / "watched"
    d.mkdir()
    w = sbx.files.watch_dir(str(d), recursive=True)
    sbx.files.write(f"{d}/top.txt", "1")
    (d / "sub").mkdir()
    (d / "sub" / "inner.txt").write_text("2")
    (d / "top.txt").unlink()
    seen = []

    def has_all():
        seen.extend((e.name, e.type) for e in w.get_new_events())
        names = {(n, t) for n, t in seen}
        return {("top.txt", FilesystemEventType.CREATE), ("sub", FilesystemEventType.CREATE),
                ("sub/inner.txt", FilesystemEventType.CREATE), ("top.txt", FilesystemEventType.REMOVE)} <= names

    wait_until(has_all, 10 * SLOW, interval=0.05, what=f"the watch events (seen {seen})")
    assert not any(".execd-" in n for n, _ in seen)  # execd's own temp files stay hidden
    w.stop()
    # include_entry: what an event left behind comes with it.
    w = sbx.files.watch_dir(str(d), include_entry=True)
    (d / "with-entry.txt").write_text("12345")
    got = []
    wait_until(lambda: got.extend(w.get_new_events()) or any(e.entry for e in got), 10 * SLOW, interval=0.05,
               what="an event with its entry")
    e = next(e for e in got if e.entry)
    assert e.name == "with-entry.txt" and e.entry.path == str(d / "with-entry.txt") and e.entry.type == FileType.FILE
    w.stop()


def test_upload_and_download_urls(sbx, tmp_path):
    path = str(tmp_path / "via-url.bin")
    up = sbx.upload_url(path)
    r = httpx.post(up, files={"file": ("ignored-name", b"\x01\x02uploaded")})
    assert r.status_code == 200, r.text
    assert r.json() == [{"name": "via-url.bin", "type": "file", "path": path}]
    r = httpx.get(sbx.download_url(path))
    assert r.status_code == 200 and r.content == b"\x01\x02uploaded"


@pytest.mark.parametrize("which", ["envd token", "execd's token"])
def test_control_plane_hands_out_the_token(execd_factory, monkeypatch, tmp_path, which):
    """Outside debug mode the SDK gets envd's token from E2B's API
    (POST /v2/sandboxes: envdAccessToken, trafficAccessToken). The stand-in
    for that call hands out execd's --envd-access-token, or execd's own
    token (the E2B listeners take either); the unmodified SDK then sends
    X-Access-Token on every call and signs its file URLs with it."""
    envd_token = "handed-out-by-the-control-plane"
    extra = ("--envd-access-token", envd_token) if which == "envd token" else ()
    ex, url = start_e2b(execd_factory, *extra)
    token = envd_token if extra else ex.token
    point_sdk_at(monkeypatch, url)
    plane = control_plane(token)
    sbx = Sandbox.create()
    assert plane.calls == [("POST", "/v2/sandboxes", "e2b_test_key")]
    assert sbx.commands.run("echo authorized").stdout == "authorized\n"
    path = str(tmp_path / "signed.txt")
    sbx.files.write(path, "signed")
    signed = sbx.download_url(path)
    assert "signature=v1_" in signed
    assert httpx.get(signed).content == b"signed"
    assert httpx.get(signed.split("&signature=")[0]).status_code == 401
    assert httpx.post(f"{url}/process.Process/List", json={}).status_code == 401
    # The envd token is the E2B listeners' alone: execd's own listener refuses it.
    assert ex.request("GET", "/command", token=False, headers={"X-EXECD-ACCESS-TOKEN": envd_token})[0] == 401


def test_debug_mode_needs_the_insecure_mode(execd_factory, monkeypatch):
    """E2B's debug mode sends no token at all: it works only against an
    execd started with --insecure-no-auth (and no envd token), whose E2B
    listener is then loopback-only and says at start that it takes none."""
    ex, url = start_e2b(execd_factory, "--insecure-no-auth", token=None)
    assert "envd API (E2B SDKs) listening on 127.0.0.1" in ex.stderr_text()
    assert "WITHOUT a token (--insecure-no-auth" in ex.stderr_text()
    monkeypatch.setenv("E2B_DEBUG", "true")
    monkeypatch.setenv("E2B_SANDBOX_URL", url)
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    sbx = Sandbox.create()
    assert sbx.sandbox_id == "debug_sandbox_id"
    assert sbx.commands.run("echo debug").stdout == "debug\n"
    # The same debug-mode SDK against a secured execd gets nothing.
    secured, secured_url = start_e2b(execd_factory)
    monkeypatch.setenv("E2B_SANDBOX_URL", secured_url)
    with pytest.raises(AuthenticationException):
        Sandbox.create().commands.run("echo never")
