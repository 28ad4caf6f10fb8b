"""Exact framing (application/x-ndjson) over plain HTTP: byte-exact output,
result fields, process control, disconnects, backpressure and reaping."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import time

import pytest

from execd_client import (PYTHON, SANITIZED, SLOW, children_of, decode_chunk, iter_lines, sha,
                          vm_rss_kib, wait_until)

MiB = 1024 * 1024
# Compat traceback text for a signalled command is Go's ExitError text
# (as the Go daemon words them: "signal: killed", "signal: terminated").
GO_SIGNAL_TEXT = {"KILL": "signal: killed", "TERM": "signal: terminated",
                  "SEGV": "signal: segmentation fault"}

# A writer that waits until execd has drained the pipe (FIONREAD on the pipe
# reaches 0) before its next write: this pins both read boundaries and the
# order in which execd observes stdout vs stderr, without any sleeps.
DRAIN_PRELUDE = r"""
import fcntl, os, struct, termios, time
def drained(fd):
    while struct.unpack('i', fcntl.ioctl(fd, termios.FIONREAD, b'\0\0\0\0'))[0]:
        time.sleep(0.0005)
def put(fd, data):
    os.write(fd, data); drained(fd)
"""


def py(script: str) -> str:
    """A shell command running `script` with this interpreter (exec keeps pipes direct)."""
    import tempfile
    d = os.path.join(tempfile.gettempdir(), f"execd-it-scripts-{os.getuid()}")
    os.makedirs(d, exist_ok=True)
    src = DRAIN_PRELUDE + script
    path = os.path.join(d, hashlib.sha1(src.encode()).hexdigest() + ".py")
    if not os.path.exists(path):
        with open(path + ".tmp", "w") as f:
            f.write(src)
        os.replace(path + ".tmp", path)
    os.chmod(d, 0o755)
    os.chmod(path, 0o644)
    return f"exec {PYTHON} {path}"


def check_result(res, out: bytes, err: bytes = b""):
    assert res.status == 200, (res.status, res.raw[:500])
    assert res.headers["content-type"].startswith("application/x-ndjson"), res.headers
    assert res.events[0]["type"] == "init"
    term = res.events[-1]
    assert term["type"] == "execution_complete", term
    assert res.stdout == out, (res.stdout[:300], out[:300])
    assert res.stderr == err, (res.stderr[:300], err[:300])
    assert term["stdout_bytes"] == len(out)
    assert term["stderr_bytes"] == len(err)
    assert term["stdout_sha256"] == sha(out)
    assert term["stderr_sha256"] == sha(err)
    for ev in res.events:
        if "text" in ev and ev["type"] in ("stdout", "stderr"):
            assert "\ufffd" not in ev["text"] or "\ufffd".encode() in out + err, ev
    return term


@pytest.mark.parametrize("name,data", [
    ("crlf", b"line1\r\nline2\r\n\r\nend\r\n"),
    ("cr_progress", b"progress 10%\rprogress 50%\rprogress 100%\rdone\n"),
    ("blank_lines", b"a\n\n\nb\n\n"),
    ("no_final_newline", b"first\nsecond without newline"),
    ("only_newlines", b"\n\n\n"),
    ("nul_and_controls", b"a\x00b\x01c\x1b[31mred\x1b[0m\x7f\x08\x07\t|\x0b\x0c\x1c\x1d\x1e\n\x00"),
    ("markdown_table", "| col | value |\n|-----|-------|\n| α   | `x|y` |\n| 😀  | **b** |\n".encode()),
    ("latin1", b"caf\xe9 na\xefve\n"),
    ("lone_continuation", b"\x80\xbf\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80ok\n"),
])
def test_bytes_roundtrip(execd, tmp_path, name, data):
    f = tmp_path / "data.bin"
    f.write_bytes(data)
    res = execd.run(f"cat {f}", exact=True)
    check_result(res, data)


def test_stderr_roundtrip_and_exit_code(execd, tmp_path):
    f = tmp_path / "e.bin"
    f.write_bytes(b"err\r\n\xff\xfe partial")
    res = execd.run(f"printf 'out\\n'; cat {f} >&2; exit 7", exact=True)
    term = check_result(res, b"out\n", f.read_bytes())
    assert term["exit_code"] == 7
    assert term["signal"] is None
    assert term["timed_out"] is False and term["interrupted"] is False
    assert isinstance(term["execution_time"], int)
    for k in ("user_cpu_ms", "system_cpu_ms", "max_rss_kib"):
        assert isinstance(term[k], int) and term[k] >= 0, (k, term)
    assert term["max_rss_kib"] > 0


def test_framing_selected_by_flag(execd_factory):
    ex = execd_factory("--framing", "exact")
    res = ex.run("printf 'x\\r\\ny'")
    assert res.headers["content-type"].startswith("application/x-ndjson")
    assert res.stdout == b"x\r\ny"
    assert res.events[-1]["type"] == "execution_complete"


def test_random_binary(execd, tmp_path):
    f = tmp_path / "rand.bin"
    res = execd.run(f"head -c 100000 /dev/urandom | tee {f}", exact=True)
    data = f.read_bytes()
    assert len(data) == 100000
    check_result(res, data)
    assert any("b64" in e for e in res.events if e["type"] == "stdout")


def test_emoji_split_across_reads(execd):
    # The 4-byte U+1F600 arrives in two pipe reads: 2 bytes, then 2 bytes + text.
    res = execd.run(py(
        "put(1, b'smile: \\xf0\\x9f')\n"
        "put(1, b'\\x98\\x80 ok\\n')\n"
        "put(2, b'\\xe2\\x82')\n"
        "put(2, b'\\xac euro\\n')\n"), exact=True)
    out = "smile: 😀 ok\n".encode()
    err = "€ euro\n".encode()
    check_result(res, out, err)
    # Valid UTF-8 overall must not be forced into b64 just because a read split it,
    # and no text chunk may contain a replacement character.
    for e in res.events:
        if e["type"] in ("stdout", "stderr"):
            assert "text" in e, e
            assert "\ufffd" not in e["text"]


def test_emoji_split_compat_lines(execd):
    res = execd.run(py("put(1, b'\\xf0\\x9f')\nput(1, b'\\x98\\x80\\n')\n"))
    assert res.texts("stdout") == ["😀"]


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "compat"])
def test_unicode_line_separators_do_not_split_events(execd, tmp_path, exact):
    data = "a\u2028b\u2029c\u0085d\x0be\x0cf\x1cg\x1dh\x1ei\n".encode()
    f = tmp_path / "seps.txt"
    f.write_bytes(data)
    res = execd.run(f"cat {f}", exact=exact)
    assert res.status == 200
    if exact:
        check_result(res, data)
    else:
        assert res.texts("stdout") == [data[:-1].decode()]
    # A consumer splitting with str.splitlines() (httpx / the Python SDK) must
    # see exactly one JSON object per non-empty line.
    lines = [ln for ln in res.raw.decode("utf-8").splitlines() if ln]
    assert len(lines) == len(res.events), lines
    assert [json.loads(ln) for ln in lines] == res.events


def test_large_output(execd):
    size = (4 if SANITIZED else 20) * MiB
    res = execd.run(f"yes 'hello world, this is line output' | head -c {size}", exact=True)
    expected = (b"hello world, this is line output\n" * (size // 33 + 1))[:size]
    check_result(res, expected)
    assert len([e for e in res.events if e["type"] == "stdout"]) > 1


def test_offsets_contiguous_interleaved(execd):
    res = execd.run("for i in $(seq 200); do echo out$i; echo err$i >&2; done", exact=True)
    out = b"".join(b"out%d\n" % i for i in range(1, 201))
    err = b"".join(b"err%d\n" % i for i in range(1, 201))
    check_result(res, out, err)  # reconstruct() asserts offsets


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "compat"])
def test_stdout_stderr_order_preserved(execd, exact):
    n = 20
    script = "".join(f"put({1 if i % 2 == 0 else 2}, b'm{i}\\n')\n" for i in range(n))
    res = execd.run(py(script), exact=exact)
    assert res.status == 200
    got = [(e["type"], e["text"]) for e in res.events if e["type"] in ("stdout", "stderr")]
    nl = "\n" if exact else ""
    want = [("stdout" if i % 2 == 0 else "stderr", f"m{i}{nl}") for i in range(n)]
    assert got == want


def test_exit_zero_compat_vs_exact_terminal(execd):
    res = execd.run("true", exact=True)
    term = check_result(res, b"")
    assert term["exit_code"] == 0
    res = execd.run("exit 5", exact=True)
    assert res.events[-1]["type"] == "execution_complete"
    assert res.events[-1]["exit_code"] == 5


def test_timeout(execd_factory):
    ex = execd_factory("--kill-grace", "300ms")
    t0 = time.monotonic()
    res = ex.run("echo before; exec sleep 30", exact=True, timeout=300)
    elapsed = time.monotonic() - t0
    term = check_result(res, b"before\n")
    assert term["timed_out"] is True
    assert term["exit_code"] is None
    assert term["signal"] == "SIGTERM"
    assert term["interrupted"] is False
    assert elapsed < 5 * SLOW, elapsed
    st, js = ex.status(res.id)
    assert st == 200 and js["running"] is False


def test_timeout_escalates_to_kill(execd_factory):
    ex = execd_factory("--kill-grace", "300ms")
    t0 = time.monotonic()
    res = ex.run("trap '' TERM; echo armed; sleep 30", exact=True, timeout=200)
    elapsed = time.monotonic() - t0
    term = check_result(res, b"armed\n")
    assert term["timed_out"] is True
    assert term["signal"] == "SIGKILL"
    assert term["exit_code"] is None
    assert 0.45 <= elapsed < 5 * SLOW, elapsed


def test_timeout_compat_error_event(execd_factory):
    ex = execd_factory("--kill-grace", "300ms")
    res = ex.run("exec sleep 30", timeout=200)
    term = res.events[-1]
    assert term["type"] == "error"
    assert term["error"]["ename"] == "CommandExecError"
    assert term["error"]["evalue"] == "-1"
    assert term["error"]["traceback"] == [GO_SIGNAL_TEXT["TERM"]]
    assert term["timed_out"] is True


@pytest.mark.parametrize("sig", ["KILL", "TERM", "SEGV"])
def test_signal_result(execd, sig):
    res = execd.run(f"echo x; kill -{sig} $$", exact=True)
    term = check_result(res, b"x\n")
    assert term["exit_code"] is None
    assert term["signal"] == f"SIG{sig}"
    assert term["timed_out"] is False and term["interrupted"] is False
    res = execd.run(f"kill -{sig} $$")
    term = res.events[-1]
    assert term["type"] == "error"
    assert term["error"]["evalue"] == "-1"
    assert term["error"]["traceback"] == [GO_SIGNAL_TEXT[sig]]


def test_commands_start_with_no_signal_ignored_or_blocked(execd):
    # execd ignores SIGPIPE and handles TERM, INT and CHLD; none of that may
    # reach a command (a writer to a closed pipe must die of SIGPIPE). The
    # child resets only what execd changed, read once at the first spawn.
    for _ in range(2):
        res = execd.run("grep -E '^Sig(Ign|Blk)' /proc/self/status; yes | head -c 1 >/dev/null; "
                        "echo pipe=${PIPESTATUS[0]}", exact=True)
        out = res.stdout.decode()
        assert "SigIgn:\t0000000000000000" in out and "SigBlk:\t0000000000000000" in out, out
        assert "pipe=141" in out, out  # yes died of SIGPIPE (128 + 13)



def test_pool_threads_leave_asynchronous_signals_to_the_loop(execd):
    # Blocked in every thread but the loop's, SIGCHLD (a command's end) is
    # delivered where it is handled; no idle pool thread is woken for it.
    # Faults stay deliverable in every thread (sanitizers report them).
    st, _ = execd.json("GET", "/files/info?path=%2F")  # file work: the pool starts
    assert st == 200
    res = execd.run("true", exact=True)
    check_result(res, b"")
    chld, term, segv = (1 << (s - 1) for s in (signal.SIGCHLD, signal.SIGTERM, signal.SIGSEGV))

    def blocked(tid):
        with open(f"/proc/{execd.pid}/task/{tid}/status") as f:
            return int(re.search(r"^SigBlk:\s*([0-9a-f]+)$", f.read(), re.M).group(1), 16)
    pool = {int(t): blocked(t) for t in os.listdir(f"/proc/{execd.pid}/task") if int(t) != execd.pid}
    assert pool, "the pool did not start"
    for tid, mask in pool.items():
        assert mask & chld and mask & term, (tid, hex(mask))
        assert not mask & segv, (tid, hex(mask))
    # The loop blocks everything only for a moment, around each clone (the
    # next spare's launcher is made right after a command ends).
    wait_until(lambda: blocked(execd.pid) & (chld | term) == 0, 5 * SLOW, what="the loop to take signals")


def test_interrupt(execd):
    c, r = execd.open_stream({"command": "echo go; exec sleep 30"}, exact=True)
    lines = iter_lines(r)
    init = json.loads(next(lines))
    assert init["type"] == "init"
    cid = init["text"]
    # wait until the command produced its first line (it is definitely running)
    for line in lines:
        if json.loads(line)["type"] == "stdout":
            break
    t0 = time.monotonic()
    st, _, body = execd.request("DELETE", f"/command?id={cid}")
    assert st == 200, body
    assert time.monotonic() - t0 < 1.0 * SLOW, "DELETE /command must return immediately"
    rest = [json.loads(x) for x in lines]
    c.close()
    term = rest[-1]
    assert term["type"] == "execution_complete"
    assert term["interrupted"] is True
    assert term["signal"] == "SIGTERM"
    assert term["exit_code"] is None
    js = execd.wait_finished(cid)
    assert js["running"] is False
    st, _, body = execd.request("DELETE", f"/command?id={cid}")
    assert st == 500, body
    assert json.loads(body)["code"] == "RUNTIME_ERROR"


def test_interrupt_escalates_to_kill(execd_factory):
    ex = execd_factory("--kill-grace", "200ms")
    c, r = ex.open_stream({"command": "trap '' TERM; echo armed; sleep 30"}, exact=True)
    lines = iter_lines(r)
    cid = json.loads(next(lines))["text"]
    for line in lines:
        if json.loads(line)["type"] == "stdout":
            break
    st, _, _ = ex.request("DELETE", f"/command?id={cid}")
    assert st == 200
    term = [json.loads(x) for x in lines][-1]
    c.close()
    assert term["interrupted"] is True
    assert term["signal"] == "SIGKILL"


def test_background(execd):
    # pipe-synchronised writes pin the order in the combined log
    res = execd.run(py("put(1, b'one\\n')\nput(2, b'two\\n')\nput(1, b'three\\n')\n"
                       "raise SystemExit(3)\n"), exact=True, background=True)
    types = [e["type"] for e in res.events]
    assert types[0] == "init" and types[-1] == "execution_complete", types
    assert "stdout" not in types and "stderr" not in types
    assert "exit_code" not in res.events[-1]
    cid = res.id
    js = execd.wait_finished(cid)
    assert js["exit_code"] == 3
    assert js["background"] is True
    st, h, body = execd.logs(cid)
    assert st == 200
    assert body == b"one\ntwo\nthree\n"
    assert int(h["execd-commands-tail-cursor"]) == len(body)
    st, h, body2 = execd.logs(cid, cursor=4)
    assert body2 == b"two\nthree\n"
    assert int(h["execd-commands-tail-cursor"]) == len(body)


def test_background_keeps_running_and_logs_grow(execd, tmp_path):
    go = tmp_path / "go"
    res = execd.run(f"echo first; while [ ! -e {go} ]; do sleep 0.01; done; echo second",
                    background=True)
    cid = res.id
    st, js = execd.status(cid)
    assert st == 200

    def first():
        st, h, body = execd.logs(cid)
        return (body, int(h["execd-commands-tail-cursor"])) if body == b"first\n" else None
    body, cursor = wait_until(first, 10 * SLOW, what="first log line")
    assert cursor == 6
    st, js = execd.status(cid)
    assert js["running"] is True
    go.touch()
    execd.wait_finished(cid)
    st, h, body = execd.logs(cid, cursor=cursor)
    assert body == b"second\n"
    assert int(h["execd-commands-tail-cursor"]) == 13


def test_foreground_continues_after_disconnect(execd, tmp_path):
    gate = tmp_path / "gate"
    c, r = execd.open_stream(
        {"command": f"echo start; while [ ! -e {gate} ]; do sleep 0.01; done; echo end; exit 4"},
        exact=True)
    cid = json.loads(r.readline())["text"]
    # hard close of the client side
    c.sock.shutdown(socket.SHUT_RDWR)
    c.close()
    st, js = execd.status(cid)
    assert st == 200 and js["running"] is True
    gate.touch()
    js = execd.wait_finished(cid)
    assert js["exit_code"] == 4
    st, h, body = execd.logs(cid)
    assert st == 200
    assert body == b"start\nend\n"
    assert execd.ping() == 200


def test_logs_of_foreground_command(execd):
    # Once the terminal event is out, the combined log must hold all output
    # (repeated: a lazily flushed log shows up as an occasional short read).
    for _ in range(30):
        res = execd.run("printf 'a\\r\\nb'; printf 'E' >&2", exact=True)
        st, h, body = execd.logs(res.id)
        assert st == 200
        assert sorted(body) == sorted(b"a\r\nbE"), (body, h)
        assert int(h["execd-commands-tail-cursor"]) == 5


def test_grandchild_holding_pipe(execd):
    t0 = time.monotonic()
    res = execd.run("sleep 30 & echo $!", exact=True)
    elapsed = time.monotonic() - t0
    pid = int(res.stdout.strip())
    try:
        check_result(res, res.stdout)
        assert res.events[-1]["exit_code"] == 0
        assert elapsed < 1.0 * SLOW, f"stream held open by grandchild for {elapsed:.2f}s"
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("flags", [(), ("--init",)], ids=["default", "init"])
def test_no_zombies(execd_factory, flags):
    ex = execd_factory(*flags)
    res = ex.run("for i in $(seq 50); do (sleep 0.1 &) ; done; echo spawned", exact=True)
    check_result(res, b"spawned\n")

    def clean():
        kids = children_of(ex.pid)
        return not kids or None
    try:
        wait_until(clean, 10 * SLOW, 0.02, "execd to have no (zombie) children")
    except AssertionError:
        raise AssertionError(f"children of execd: {children_of(ex.pid)}")


def test_no_zombies_as_pid1(execd_factory):
    """execd --init as PID 1 of a fresh PID namespace inherits every orphan and must reap it."""
    import shutil
    import subprocess
    unshare = shutil.which("unshare")
    if not unshare or os.geteuid() != 0:
        pytest.skip("needs root and util-linux unshare")
    if subprocess.run([unshare, "--pid", "--fork", "true"], capture_output=True).returncode != 0:
        pytest.skip("cannot create a PID namespace here")
    ex = execd_factory("--init", wrapper=(unshare, "--pid", "--fork", "--kill-child"), check_exit=False)
    inner = wait_until(lambda: children_of(ex.pid), 10 * SLOW, what="execd under unshare")
    assert len(inner) == 1, inner
    pid = inner[0][0]
    res = ex.run("for i in $(seq 50); do (sleep 0.5 &) ; done; echo spawned", exact=True)
    check_result(res, b"spawned\n")
    # the orphans really were handed to execd (else this test proves nothing)
    assert len(children_of(pid)) >= 10, children_of(pid)
    try:
        wait_until(lambda: not children_of(pid), 10 * SLOW, 0.02, "execd (pid 1) to reap all orphans")
    except AssertionError:
        raise AssertionError(f"children of execd (pid 1): {children_of(pid)}")
    os.kill(pid, signal.SIGTERM)
    assert ex.proc.wait(10 * SLOW) == 0


def test_slow_reader_backpressure(execd):
    size = (10 if SANITIZED else 50) * MiB
    limit_kib = (256 if SANITIZED else 64) * 1024
    base = vm_rss_kib(execd.pid)
    peak = base
    c, r = execd.open_stream({"command": f"head -c {size} /dev/urandom"}, exact=True)
    lines = iter_lines(r)
    cid = json.loads(next(lines))["text"]
    # Stall: read nothing for a while. Without backpressure `head` would be done.
    stall_end = time.monotonic() + 1.5
    while time.monotonic() < stall_end:
        peak = max(peak, vm_rss_kib(execd.pid))
        time.sleep(0.05)  # sampling interval of a deliberately stalled reader
    st, js = execd.status(cid)
    assert js["running"] is True, "producer finished while the client read nothing"
    # Now read slowly.
    h = hashlib.sha256()
    n = 0
    offset = 0
    term = None
    for i, line in enumerate(lines):
        ev = json.loads(line)
        if ev["type"] == "stdout":
            assert ev["offset"] == offset
            chunk = decode_chunk(ev)
            offset += len(chunk)
            h.update(chunk)
            n += len(chunk)
        elif ev["type"] == "execution_complete":
            term = ev
        if i % 4 == 0:
            peak = max(peak, vm_rss_kib(execd.pid))
            time.sleep(0.003)  # a slow consumer
    c.close()
    assert term is not None
    assert n == size and term["stdout_bytes"] == size
    assert term["stdout_sha256"] == h.hexdigest()
    print(f"slow reader: execd RSS base {base} KiB, peak +{(peak - base) / 1024:.1f} MiB")
    assert peak - base < limit_kib, f"execd RSS grew {(peak - base) / 1024:.1f} MiB"


def test_concurrent_commands(execd):
    import concurrent.futures as cf
    n = 20 if SANITIZED else 50

    def one(i):
        res = execd.run(f"echo start{i}; printf 'x%.0s' $(seq {i + 1}); echo; exit {i % 7}", exact=True)
        return i, res
    with cf.ThreadPoolExecutor(n) as pool:
        for i, res in pool.map(one, range(n)):
            check_result(res, f"start{i}\n".encode() + b"x" * (i + 1) + b"\n")
            assert res.events[-1]["exit_code"] == i % 7


def test_graceful_shutdown_with_running_command(execd_factory):
    ex = execd_factory("--graceful-shutdown-timeout", "2s", "--kill-grace", "300ms", check_exit=False)
    c, r = ex.open_stream({"command": "echo up; exec sleep 30"}, exact=True)
    lines = iter_lines(r)
    for line in lines:
        if json.loads(line)["type"] == "stdout":
            break
    t0 = time.monotonic()
    ex.proc.send_signal(signal.SIGTERM)
    rest = [json.loads(x) for x in lines]
    c.close()
    rc = ex.proc.wait(10 * SLOW)
    assert rc == 0
    assert time.monotonic() - t0 < 3 * SLOW
    # the running command got the signal and the stream was finished properly
    assert rest and rest[-1]["type"] == "execution_complete", rest
    assert rest[-1]["signal"] in ("SIGTERM", "SIGKILL")


# ---- compat framing (default) event order, over plain HTTP ---------------

def test_compat_event_order_and_no_linger(execd):
    t0 = time.monotonic()
    res = execd.run("echo hi; echo there >&2")
    elapsed = time.monotonic() - t0
    assert res.headers["content-type"].startswith("text/event-stream")
    types = [e["type"] for e in res.events]
    assert types[:2] == ["init", "ping"], types
    assert types[-1] == "execution_complete", types
    assert res.events[1]["text"] == "pong"
    assert sorted(types[2:-1]) == ["stderr", "stdout"]
    assert res.texts("stdout") == ["hi"] and res.texts("stderr") == ["there"]
    assert res.events[-1]["exit_code"] == 0
    assert res.events[-1]["stdout_bytes"] == 3
    # the Go daemon lingers 1 s after the terminal event; execd must not
    assert elapsed < 0.6 * SLOW, elapsed


def test_compat_background_stream(execd):
    res = execd.run("exec sleep 0.2", background=True)
    assert [e["type"] for e in res.events] == ["init", "ping", "execution_complete"]
    assert "exit_code" not in res.events[-1]
    assert execd.wait_finished(res.id)["exit_code"] == 0


def test_ping_every_three_seconds(execd):
    res = execd.run("sleep 3.4; echo late", exact=True)
    pings = [e for e in res.events if e["type"] == "ping"]
    assert len(pings) == 2, [e["type"] for e in res.events]
    gap = pings[1]["timestamp"] - pings[0]["timestamp"]
    assert 2800 <= gap <= 3400, gap
    assert res.stdout == b"late\n"
