"""stdin for commands (issue 13): POST /command {"stdin": true}, then
POST /command/{id}/stdin[?offset=N][&eof=true] streams bodies into it."""

from __future__ import annotations

import http.client
import socket
import time

from execd_client import SLOW, wait_until
from resume_helpers import EventReader, collect, reset


def write(ex, cid, data: bytes, **query):
    q = "&".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in query.items())
    return ex.json("POST", f"/command/{cid}/stdin" + (f"?{q}" if q else ""), data)


def test_cat_round_trip_with_retries_and_eof(execd):
    r = EventReader(execd, "POST", "/command", {"command": "cat", "id": "cat-1", "stdin": True})
    events = r.events()
    assert next(events)["type"] == "init"
    assert write(execd, "cat-1", b"hello ") == (200, {"offset": 6})
    # A retry of the same write (the answer was lost): applied once.
    assert write(execd, "cat-1", b"hello ", offset=0) == (200, {"offset": 6})
    # Half of it was new.
    assert write(execd, "cat-1", b"o world", offset=4) == (200, {"offset": 11})
    st, js = write(execd, "cat-1", b"x", offset=12)
    assert st == 409 and js["code"] == "STDIN_OFFSET_GAP", js
    assert execd.status("cat-1")[1]["stdin_offset"] == 11
    assert write(execd, "cat-1", b"!\n", offset=11, eof=True) == (200, {"offset": 13})
    bufs = {"stdout": bytearray(), "stderr": bytearray()}
    term = collect(events, bufs)
    r.close()
    assert bytes(bufs["stdout"]) == b"hello world!\n"
    assert term["exit_code"] == 0
    # After eof: a retry that brings nothing new learns the offset, new bytes are refused.
    assert write(execd, "cat-1", b"!\n", offset=11, eof=True) == (200, {"offset": 13})
    st, js = write(execd, "cat-1", b"more")
    assert st == 409, js


def test_python_input(execd):
    r = EventReader(execd, "POST", "/command",
                    {"command": "python3 -c 'print(input()[::-1])'", "id": "py-1", "stdin": True})
    events = r.events()
    next(events)
    assert write(execd, "py-1", b"stressed\n") == (200, {"offset": 9})
    bufs = {"stdout": bytearray(), "stderr": bytearray()}
    term = collect(events, bufs)
    r.close()
    assert bytes(bufs["stdout"]) == b"desserts\n" and term["exit_code"] == 0


def test_large_body_is_streamed_with_backpressure(execd):
    size = 24 << 20
    execd.run("sha256sum", id="big-in", stdin=True, background=True)
    payload = bytes(range(256)) * (size // 256)
    assert write(execd, "big-in", payload, eof=True) == (200, {"offset": size})
    js = execd.wait_finished("big-in")
    st, h, out = execd.logs("big-in")
    import hashlib
    assert out.decode().split()[0] == hashlib.sha256(payload).hexdigest()


def test_a_command_that_never_reads_gets_503_after_the_stdin_timeout(execd_factory):
    ex = execd_factory("--stdin-timeout", "400ms")
    ex.run("sleep 30", id="deaf-1", stdin=True, background=True)
    t0 = time.monotonic()
    st, js = write(ex, "deaf-1", b"z" * (4 << 20))
    assert st == 503, js
    assert 0.3 < time.monotonic() - t0 < 20 * SLOW
    # Bounded: what was accepted is a pipe's and a queue's worth, not the body.
    assert 0 < js["offset"] < (2 << 20), js
    assert ex.json("DELETE", "/command?id=deaf-1")[0] == 200
    ex.wait_finished("deaf-1")


def test_stdin_refusals(execd):
    execd.run("sleep 0.1", id="nostdin")
    st, js = write(execd, "nostdin", b"x")
    assert st == 409 and js["code"] == "STDIN_NOT_OPEN"
    assert write(execd, "nobody", b"x")[0] == 404
    execd.run("cat", id="cat-2", stdin=True, background=True)
    assert write(execd, "cat-2", b"x", offset="abc")[0] == 400
    assert write(execd, "cat-2", b"", eof=True) == (200, {"offset": 0})
    execd.wait_finished("cat-2")


def test_tty_stdin(execd):
    r = EventReader(execd, "POST", "/command",
                    {"command": "read line; echo got:$line", "id": "tty-1", "stdin": True, "tty": True})
    events = r.events()
    next(events)
    assert write(execd, "tty-1", b"abc\n")[0] == 200
    bufs = {"stdout": bytearray(), "stderr": bytearray()}
    term = collect(events, bufs)
    r.close()
    assert b"got:abc" in bytes(bufs["stdout"]) and term["exit_code"] == 0


def test_a_stdin_writer_that_resets_mid_body(execd):
    """The client vanishes halfway through its body: the next write works and
    continues from the offset reached."""
    execd.run("cat", id="cat-3", stdin=True, background=True)
    s = socket.create_connection((execd.host, execd.port))
    s.sendall(b"POST /command/cat-3/stdin HTTP/1.1\r\nHost: x\r\n" +
              f"X-EXECD-ACCESS-TOKEN: {execd.token}\r\nContent-Length: 1000\r\n\r\n".encode() + b"a" * 400)
    def offset():
        return execd.status("cat-3")[1]["stdin_offset"] == 400
    wait_until(offset, 10 * SLOW, what="400 bytes accepted")
    reset(s)
    # A garbage body length on the same route, then a proper retry.
    st, js = write(execd, "cat-3", b"b" * 600, offset=400, eof=True)
    assert (st, js) == (200, {"offset": 1000})
    execd.wait_finished("cat-3")
    assert execd.logs("cat-3")[2] == b"a" * 400 + b"b" * 600
