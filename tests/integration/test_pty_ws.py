"""PTY sessions over the OpenSandbox WebSocket protocol (OpenSandbox's PTY protocol, as the Go daemon 1.0.19 speaks it),
with the `websockets` client against a real execd.

Covers: interactive echo, resize seen by `stty size`, SIGINT to the foreground
job, replay with `since` (and the explicit gap notice), takeover with 4001,
409 without takeover, pipe mode with separate stderr, the `exit` frame after
every output byte, a large burst through a slow reader with bounded execd RSS,
DELETE killing job-control jobs, and bad input (unknown ids, malformed and
oversized frames, bad JSON control frames).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import time

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from execd_client import SANITIZED, SLOW, vm_rss_kib, wait_until, pids_with_cmdline

TIMEOUT = 10 * SLOW


def create(ex, **body) -> str:
    st, js = ex.json("POST", "/pty", body)
    assert st == 201, (st, js)
    return js["session_id"]


def ws_url(ex, sid, **query) -> str:
    q = "&".join(f"{k}={v}" for k, v in query.items())
    return ex.base_url.replace("http://", "ws://", 1) + f"/pty/{sid}/ws" + (f"?{q}" if q else "")


def attach(ex, sid, **query):
    # No keepalive pings from the client: its pong waits behind whatever
    # output is queued ahead of it, and a client reading a burst under CI
    # load took longer than the library's 20 s to get there and closed the
    # connection itself ("closed (None, None)").
    return connect(ws_url(ex, sid, **query), additional_headers={"X-EXECD-ACCESS-TOKEN": ex.token},
                   max_size=None, open_timeout=TIMEOUT, ping_interval=None)


class Reader:
    """Collects frames of one connection; waits for conditions with deadlines."""

    def __init__(self, ws):
        self.ws = ws
        self.out = bytearray()  # 0x01 payloads
        self.err = bytearray()  # 0x02 payloads
        self.replay = []     # (offset, bytes)
        self.texts = []      # decoded JSON text frames
        self.order = []      # kinds in arrival order
        self.closed = None

    def pump_once(self, timeout):
        try:
            m = self.ws.recv(timeout=timeout)
        except TimeoutError:
            return
        except ConnectionClosed as e:
            self.closed = (e.rcvd.code if e.rcvd else None, e.rcvd.reason if e.rcvd else None)
            return
        if isinstance(m, bytes):
            ch = m[0]
            if ch == 1:
                self.out += m[1:]
                self.order.append("stdout")
            elif ch == 2:
                self.err += m[1:]
                self.order.append("stderr")
            elif ch == 3:
                (off,) = struct.unpack(">Q", m[1:9])
                self.replay.append((off, m[9:]))
                self.order.append("replay")
        else:
            js = json.loads(m)
            self.texts.append(js)
            self.order.append(js["type"])

    def until(self, pred, what, timeout=TIMEOUT):
        deadline = time.monotonic() + timeout
        while not pred():
            if self.closed is not None:
                raise AssertionError(f"closed {self.closed} while waiting for {what}; out={self.out[-500:]!r}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; out={self.out[-500:]!r}")
            self.pump_once(0.2)

    def until_closed(self, timeout=TIMEOUT):
        deadline = time.monotonic() + timeout
        while self.closed is None:
            assert time.monotonic() < deadline, "connection did not close"
            self.pump_once(0.2)
        return self.closed

    def text_of(self, kind):
        return [t for t in self.texts if t["type"] == kind]


def test_interactive_echo_resize_and_term(execd):
    sid = create(execd)
    with attach(execd, sid) as ws:
        r = Reader(ws)
        r.until(lambda: r.text_of("connected"), "connected")
        assert r.text_of("connected")[0] == {"type": "connected", "session_id": sid, "mode": "pty"}
        ws.send(b"\x00echo hi-$((6*7)) $TERM\n")
        r.until(lambda: b"hi-42 xterm-256color" in r.out, "echo")
        ws.send(json.dumps({"type": "resize", "cols": 123, "rows": 45}))
        ws.send(b"\x00stty size; [ -t 0 ] && echo is-a-tty\n")
        r.until(lambda: b"45 123" in r.out and b"\nis-a-tty" in r.out, "stty size")
        ws.send(json.dumps({"type": "stdin", "data": "echo via-$((1))-json\n"}))
        r.until(lambda: b"via-1-json" in r.out, "json stdin")
        ws.send(json.dumps({"type": "ping"}))
        r.until(lambda: r.text_of("pong"), "pong")
    st, js = execd.json("GET", f"/pty/{sid}")
    assert st == 200 and js["running"] is True and js["output_offset"] >= len(r.out)


def test_sigint_reaches_the_foreground_job(execd):
    sid = create(execd)
    with attach(execd, sid) as ws:
        r = Reader(ws)
        r.until(lambda: r.text_of("connected"), "connected")
        ws.send(b"\x00sleep 421.5; echo rc=$?\n")
        wait_until(lambda: pids_with_cmdline("sleep 421.5"), TIMEOUT, what="sleep running")
        ws.send(json.dumps({"type": "signal", "signal": "SIGINT"}))
        # The job dies of SIGINT; the interactive shell survives.
        ws.send(b"\x00echo after=$?-$((2+2))\n")
        r.until(lambda: b"after=130-4" in r.out, "sleep interrupted")
        assert not pids_with_cmdline("sleep 421.5")


def test_pipe_mode_separates_stderr(execd):
    sid = create(execd)
    with attach(execd, sid, pty=0) as ws:
        r = Reader(ws)
        r.until(lambda: r.text_of("connected"), "connected")
        assert r.text_of("connected")[0]["mode"] == "pipe"
        ws.send(b"\x00echo to-out; echo to-err >&2; [ -t 0 ] || echo no-tty\n")
        r.until(lambda: r.out == b"to-out\nno-tty\n" and r.err == b"to-err\n", "pipe output")


def test_exit_frame_after_all_output(execd):
    n = 20000 if SANITIZED else 200000
    sid = create(execd, command=f"seq 1 {n}; exit 5")
    with attach(execd, sid, pty=0) as ws:
        r = Reader(ws)
        code, reason = r.until_closed(60 * SLOW)
    assert (code, reason) == (1000, "process exited")
    expected = "".join(f"{i}\n" for i in range(1, n + 1)).encode()
    assert r.out == expected
    assert r.texts[-1] == {"type": "exit", "exit_code": 5}
    assert r.order[-1] == "exit"
    # Reattaching after the exit replays and reports the exit again (no restart).
    with attach(execd, sid) as ws:
        r2 = Reader(ws)
        r2.until_closed()
        assert r2.text_of("exit") == [{"type": "exit", "exit_code": 5}]
        assert r2.replay and r2.replay[0][1] == expected[-len(r2.replay[0][1]):]


def test_replay_since_and_live_continuity(execd):
    sid = create(execd)
    with attach(execd, sid) as ws:
        r = Reader(ws)
        r.until(lambda: r.text_of("connected"), "connected")
        ws.send(b"\x00echo one-$((1))\n")
        r.until(lambda: b"one-1" in r.out, "one")
        first = len(r.out)
        ws.send(b"\x00echo two-$((2))\n")
    # Reconnect from where we were until the second output is in the replay.
    def replayed():
        with attach(execd, sid, since=first) as ws:
            r2 = Reader(ws)
            r2.until(lambda: r2.text_of("connected"), "connected")
            return r2 if r2.replay and b"two-2" in r2.replay[0][1] else None
    r2 = wait_until(replayed, TIMEOUT, 0.05, "replay with two-2")
    assert r2.replay[0][0] == first
    assert r2.order[:2] == ["replay", "connected"]
    assert not r2.text_of("gap")
    # since=0 replays everything from offset 0, and live bytes continue exactly.
    with attach(execd, sid, since=0) as ws:
        r3 = Reader(ws)
        r3.until(lambda: r3.text_of("connected"), "connected")
        off, data = r3.replay[0]
        assert off == 0 and data.startswith(r.out[:first])
        ws.send(b"\x00echo three-$((3))\n")
        r3.until(lambda: b"three-3" in r3.out, "live")
        st, js = execd.json("GET", f"/pty/{sid}")
        assert js["output_offset"] >= len(data) + len(r3.out)


def test_gap_notice_when_since_is_older_than_the_ring(execd_factory):
    ex = execd_factory("--pty-replay-bytes", "4096")
    sid = create(ex, command="head -c 20000 /dev/zero | tr '\\0' x; sleep 422.9")
    with attach(ex, sid, pty=0) as ws:
        r = Reader(ws)
        r.until(lambda: len(r.out) >= 20000, "output")
    with attach(ex, sid, since=10) as ws:
        r = Reader(ws)
        r.until(lambda: r.text_of("connected"), "connected")
        assert r.order[:3] == ["gap", "replay", "connected"]
        gap = r.text_of("gap")[0]
        assert gap["requested"] == 10 and gap["available_from"] == 20000 - 4096
        assert r.replay[0] == (20000 - 4096, b"x" * 4096)
    # Without an explicit since there is no gap frame.
    with attach(ex, sid) as ws:
        r = Reader(ws)
        r.until(lambda: r.text_of("connected"), "connected")
        assert not r.text_of("gap")
    ex.request("DELETE", f"/pty/{sid}")


def test_second_client_409_and_takeover_4001(execd):
    sid = create(execd)
    with attach(execd, sid) as ws1:
        r1 = Reader(ws1)
        r1.until(lambda: r1.text_of("connected"), "connected")
        with pytest.raises(InvalidStatus) as exc:
            attach(execd, sid)
        assert exc.value.response.status_code == 409
        assert json.loads(exc.value.response.body)["code"] == "ALREADY_CONNECTED"
        # A plain GET with takeover=1 never evicts.
        st, h, body = execd.request("GET", f"/pty/{sid}/ws?takeover=1")
        assert st == 409
        with attach(execd, sid, takeover=1) as ws2:
            assert r1.until_closed() == (4001, "TAKEN_OVER")
            r2 = Reader(ws2)
            r2.until(lambda: r2.text_of("connected"), "connected")
            ws2.send(b"\x00echo new-$((5))\n")
            r2.until(lambda: b"new-5" in r2.out, "new client works")


def test_delete_kills_job_control_jobs_and_tells_the_client(execd):
    sid = create(execd)
    with attach(execd, sid) as ws:
        r = Reader(ws)
        r.until(lambda: r.text_of("connected"), "connected")
        ws.send(b"\x00sleep 423.1 & sleep 423.2 & (sleep 423.3 &); echo started-$((9))\n")
        r.until(lambda: b"started-9" in r.out, "jobs started")
        wait_until(lambda: len(pids_with_cmdline("sleep 423.")) == 3, TIMEOUT, what="jobs")
        assert execd.request("DELETE", f"/pty/{sid}")[0] == 200
        assert r.until_closed() == (1000, "process exited")
        assert r.text_of("exit") == [{"type": "exit", "exit_code": -1}]
    wait_until(lambda: not pids_with_cmdline("sleep 423."), TIMEOUT, what="jobs killed")
    assert execd.json("GET", f"/pty/{sid}")[0] == 404


def test_burst_through_slow_reader_with_bounded_rss(execd):
    mib = 5 if SANITIZED else 50
    sid = create(execd, command=f"head -c {mib}M /dev/urandom | base64 -w 0; echo; exit 0")
    base_rss = vm_rss_kib(execd.pid)
    peak = base_rss
    with attach(execd, sid) as ws:
        r = Reader(ws)
        last_sample = 0
        while r.closed is None:
            r.pump_once(5)
            if len(r.out) - last_sample > (256 << 10):
                last_sample = len(r.out)
                peak = max(peak, vm_rss_kib(execd.pid))
                time.sleep(0.005)  # the slow reader (this is the load, not synchronisation)
    assert r.closed == (1000, "process exited")
    data = r.out.replace(b"\r\n", b"").replace(b"\n", b"")
    assert len(base64.b64decode(data)) == mib << 20
    assert r.texts[-1] == {"type": "exit", "exit_code": 0}
    # Send queue budget (1 MiB) + ring (1 MiB) + read buffers; never the burst.
    assert peak - base_rss < 24 * 1024, (base_rss, peak)


def test_unknown_session_and_token(execd):
    assert execd.json("GET", "/pty/nope")[0] == 404
    st, js = execd.json("DELETE", "/pty/nope")
    assert st == 404 and js["code"] == "CONTEXT_NOT_FOUND"
    with pytest.raises(InvalidStatus) as exc:
        attach(execd, "nope")
    assert exc.value.response.status_code == 404
    sid = create(execd)
    with pytest.raises(InvalidStatus) as exc:
        connect(ws_url(execd, sid), open_timeout=TIMEOUT)  # no token
    assert exc.value.response.status_code == 401
    assert execd.json("POST", "/pty", "{bad")[0] == 400


def test_bad_json_and_unknown_frames_keep_the_session(execd):
    sid = create(execd)
    with attach(execd, sid) as ws:
        r = Reader(ws)
        r.until(lambda: r.text_of("connected"), "connected")
        ws.send("{not json")
        r.until(lambda: r.text_of("error"), "error frame")
        assert r.text_of("error")[0]["code"] == "INVALID_FRAME"
        ws.send(json.dumps({"type": "teleport"}))
        r.until(lambda: len(r.text_of("error")) == 2, "second error")
        assert r.text_of("error")[1] == {"type": "error", "error": 'unknown frame type "teleport"',
                                         "code": "INVALID_FRAME"}
        ws.send(json.dumps({"type": "resize", "cols": "80"}))
        ws.send(b"\x07ignored channel")
        ws.send(b"\x00echo survived-$((8))\n")
        r.until(lambda: b"survived-8" in r.out, "session survives")


def _raw_ws(ex, sid):
    s = socket.create_connection(("127.0.0.1", ex.port), timeout=TIMEOUT)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET /pty/{sid}/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
               f"X-EXECD-ACCESS-TOKEN: {ex.token}\r\n\r\n").encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += s.recv(4096)
    assert buf.startswith(b"HTTP/1.1 101"), buf
    return s, buf.split(b"\r\n\r\n", 1)[1]


def _read_close_code(s, buf):
    """Reads server frames until a close frame; returns its code."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        while len(buf) >= 2:
            op, ln = buf[0] & 0x0F, buf[1] & 0x7F
            hdr = 2
            if ln == 126:
                if len(buf) < 4:
                    break
                ln, hdr = struct.unpack(">H", buf[2:4])[0], 4
            elif ln == 127:
                if len(buf) < 10:
                    break
                ln, hdr = struct.unpack(">Q", buf[2:10])[0], 10
            if len(buf) < hdr + ln:
                break
            payload, buf = buf[hdr:hdr + ln], buf[hdr + ln:]
            if op == 8:
                return struct.unpack(">H", payload[:2])[0]
        chunk = s.recv(65536)
        if not chunk:
            return None
        buf += chunk
    raise AssertionError("no close frame")


def _masked(op, payload, fin=True):
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | op])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack(">H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack(">Q", n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


@pytest.mark.parametrize("frame,code", [
    (b"\x81\x05hello", 1002),                                 # unmasked client frame
    (None, 1007),                                             # invalid UTF-8 text
    (b"\x83\x80abcd", 1002),                                  # reserved opcode
])
def test_malformed_frames_close_with_protocol_codes(execd, frame, code):
    sid = create(execd)
    s, rest = _raw_ws(execd, sid)
    s.sendall(frame if frame is not None else _masked(1, b"\xff\xfe"))
    assert _read_close_code(s, rest) == code
    s.close()
    # The session survives its client's mistakes.
    with attach(execd, sid) as ws:
        r = Reader(ws)
        ws.send(b"\x00echo ok-$((3))\n")
        r.until(lambda: b"ok-3" in r.out, "session alive")


def test_oversized_message_closes_1009(execd_factory):
    ex = execd_factory("--max-body", "65536")
    sid = create(ex)
    s, rest = _raw_ws(ex, sid)
    s.sendall(_masked(2, b"\x00" + b"a" * 70000))
    assert _read_close_code(s, rest) == 1009
    s.close()


def test_fragmented_stdin_and_client_close_handshake(execd):
    sid = create(execd)
    s, rest = _raw_ws(execd, sid)
    s.sendall(_masked(2, b"\x00echo frag", fin=False) + _masked(9, b"p") + _masked(0, b"-$((7))\n"))
    buf = rest
    deadline = time.monotonic() + TIMEOUT
    while b"frag-7" not in buf.replace(b"frag-$((7))", b""):
        assert time.monotonic() < deadline
        buf += s.recv(65536)
    s.sendall(_masked(8, struct.pack(">H", 1000) + b"bye"))
    assert _read_close_code(s, b"") == 1000


