"""Read-only PTY viewers (GET /pty/{id}/ws?mode=viewer, OpenSandbox PR 1420) with the
`websockets` client against a real execd: replay and live output as offset frames,
READ_ONLY refusals, a stalled viewer that never slows the holder and catches up with
a gap, the cap, and hostile viewers (no token, garbage, resets at each phase)."""

from __future__ import annotations

import json
import socket
import struct
import time

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from execd_client import SLOW, wait_until
from test_pty_ws import Reader, attach, create, ws_url

TIMEOUT = 10 * SLOW


def view(ex, sid, sock=None, **query):
    # A viewer on its own socket is one that stalls: nothing buffered on the
    # client side. No viewer sends keepalive pings of its own (as attach()):
    # a pong queued behind a burst comes back later than the library waits.
    stalled = {"max_queue": 1} if sock else {}
    return connect(ws_url(ex, sid, mode="viewer", **query), additional_headers={"X-EXECD-ACCESS-TOKEN": ex.token},
                   max_size=None, open_timeout=TIMEOUT, sock=sock, ping_interval=None, **stalled)


def viewer_bytes(r: Reader) -> bytes:
    """The viewer's offset frames joined, checking they are contiguous."""
    out = bytearray()
    for off, data in r.replay:
        assert off == len(out), (off, len(out))
        out += data
    return bytes(out)


def test_viewers_get_replay_and_live_output_with_offsets_and_cannot_type(execd):
    sid = create(execd)
    with attach(execd, sid) as holder:
        h = Reader(holder)
        h.until(lambda: h.text_of("connected"), "holder connected")
        holder.send(b"\x00echo one-$((1))\n")
        h.until(lambda: b"one-1" in h.out, "first output")
        with view(execd, sid) as v1, view(execd, sid) as v2:
            r1, r2 = Reader(v1), Reader(v2)
            for r in (r1, r2):
                r.until(lambda r=r: r.text_of("connected"), "viewer connected")
                assert r.text_of("connected")[0] == {"type": "connected", "session_id": sid, "mode": "pty",
                                                     "role": "viewer"}
                assert b"one-1" in viewer_bytes(r)
            holder.send(b"\x00echo two-$((1+1))\n")
            for r in (r1, r2):
                r.until(lambda r=r: b"two-2" in viewer_bytes(r), "live output at the viewer")
            # Everything a viewer can send that would act on the session is refused.
            v1.send(b"\x00echo typed-by-viewer\n")
            v1.send(json.dumps({"type": "stdin", "data": "echo typed-by-viewer\n"}))
            v1.send(json.dumps({"type": "resize", "cols": 10, "rows": 5}))
            v1.send(json.dumps({"type": "signal", "signal": "SIGINT"}))
            v1.send(json.dumps({"type": "ping"}))
            r1.until(lambda: len(r1.text_of("error")) == 4 and r1.text_of("pong"), "four refusals and a pong")
            assert {e["code"] for e in r1.text_of("error")} == {"READ_ONLY"}
            # The holder keeps the session: a second holder still gets 409,
            # and the terminal size is the holder's.
            with pytest.raises(InvalidStatus) as refused:
                attach(execd, sid)
            assert refused.value.response.status_code == 409
            holder.send(b"\x00stty size; echo marker-$((3))\n")
            h.until(lambda: b"marker-3" in h.out, "marker")
            assert b"typed-by-viewer" not in h.out
            assert b"5 10" not in h.out
            # Viewers saw exactly the holder's bytes.
            for r in (r1, r2):
                r.until(lambda r=r: b"marker-3" in viewer_bytes(r), "marker at the viewer")
            holder.send(b"\x00exit 3\n")
            h.until_closed()
            for r in (r1, r2):
                r.until_closed()
                assert r.text_of("exit") == [{"type": "exit", "exit_code": 3}]
                assert viewer_bytes(r) == viewer_bytes(h) + bytes(h.out)


def test_a_viewer_of_a_session_that_ended_gets_the_replay_then_exit(execd):
    sid = create(execd, command="echo done-$((2*3))")
    with attach(execd, sid) as holder:
        h = Reader(holder)
        assert h.until_closed()
    with view(execd, sid) as v:
        r = Reader(v)
        r.until_closed()
        assert b"done-6" in viewer_bytes(r)
        assert [t["type"] for t in r.texts] == ["connected", "exit"]


def test_a_stalled_viewer_never_slows_the_holder_and_catches_up_with_a_gap(execd_factory):
    ex = execd_factory("--pty-replay-bytes", "65536")
    sid = create(ex)
    with attach(ex, sid) as holder:
        h = Reader(holder)
        h.until(lambda: h.text_of("connected"), "holder connected")
        # The socket keeps its default buffers: one shrunk with SO_RCVBUF and
        # widened again later drains what the kernel holds through a window
        # that regrows only slowly (a minute and more under load).
        small = socket.create_connection((ex.host, ex.port))
        with view(ex, sid, sock=small) as stalled:
            # 16 MB through the terminal while the viewer reads nothing (more
            # than the socket buffers between them hold: at most 4 MiB of
            # send buffer, the receive buffer, which does not grow while
            # nothing is read, and execd's 1 MiB queue): the holder gets all
            # of it.
            holder.send(b"\x00head -c 12000000 /dev/zero | base64 -w 0; echo; echo end-$((4*4))\n")
            h.until(seen_in(h.out, b"end-16"), "the holder's burst", timeout=60 * SLOW)
            # The viewer reads again.
            r = Reader(stalled)
            holder.send(b"\x00echo after-$((5*5))\n")
            h.until(seen_in(h.out, b"after-25"), "after")
            r.until(lambda: b"after-25" in b"".join(d for _, d in r.replay[-3:]), "the viewer caught up",
                    timeout=60 * SLOW)
            gaps = r.text_of("gap")
            assert gaps, "a viewer that fell behind the ring is told what it lost"
            # after the last gap the frames are contiguous again, and they are
            # the holder's bytes at those offsets
            after_gap = r.replay[sum(1 for k in r.order[:_last_index(r.order, "gap")] if k == "replay"):]
            assert after_gap[0][0] == gaps[-1]["available_from"]
            for (off, data), (next_off, _) in zip(after_gap, after_gap[1:]):
                assert off + len(data) == next_off
            # (what the shell wrote before the holder attached came to it as replay)
            holder = viewer_bytes(h) + bytes(h.out)
            for off, data in after_gap:
                # (the holder may not have read the prompt after the marker yet)
                n = max(0, min(len(data), len(holder) - off))
                assert holder[off:off + n] == data[:n], (off, n)


def seen_in(buf: bytearray, marker: bytes):
    """A predicate for Reader.until that scans only what arrived since its
    last call: `marker in buf` on each of the thousands of frames of a 16 MB
    burst read the whole buffer each time, and took longer than the minute
    allowed on a loaded machine."""
    scanned = 0

    def pred() -> bool:
        nonlocal scanned
        found = buf.find(marker, max(0, scanned - len(marker))) >= 0
        scanned = len(buf)
        return found
    return pred


def _last_index(items, kind) -> int:
    return max(i for i, k in enumerate(items) if k == kind)


def test_viewer_cap_unknown_mode_and_no_token(execd_factory):
    ex = execd_factory("--max-pty-viewers", "2")
    sid = create(ex)
    with view(ex, sid), view(ex, sid):
        with pytest.raises(InvalidStatus) as capped:
            view(ex, sid)
        assert capped.value.response.status_code == 429
    # the two left: room again
    wait_until(lambda: _viewer_accepted(ex, sid), TIMEOUT, 0.05, "a viewer slot to free up")
    with pytest.raises(InvalidStatus) as bad:
        connect(ws_url(ex, sid, mode="spectator"), additional_headers={"X-EXECD-ACCESS-TOKEN": ex.token},
                open_timeout=TIMEOUT)
    assert bad.value.response.status_code == 400
    with pytest.raises(InvalidStatus) as unauth:
        connect(ws_url(ex, sid, mode="viewer"), open_timeout=TIMEOUT)
    assert unauth.value.response.status_code == 401


def _viewer_accepted(ex, sid) -> bool:
    try:
        with view(ex, sid):
            return True
    except InvalidStatus:
        return False


def test_viewers_that_send_garbage_reset_or_vanish_leave_the_session_working(execd):
    sid = create(execd)
    with attach(execd, sid) as holder:
        h = Reader(holder)
        h.until(lambda: h.text_of("connected"), "holder connected")
        holder.send(b"\x00head -c 300000 /dev/zero | base64 -w 0; echo\n")
        with view(execd, sid) as g:
            r = Reader(g)
            g.send("{not json")
            g.send(json.dumps({"type": "teleport"}))
            r.until(lambda: len(r.text_of("error")) == 2, "two INVALID_FRAME errors")
            assert {e["code"] for e in r.text_of("error")} == {"INVALID_FRAME"}
        # resets: before the upgrade answer is read, mid-replay, and after connected
        for phase in ("handshake", "replay", "live"):
            s = socket.create_connection((execd.host, execd.port))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall((f"GET /pty/{sid}/ws?mode=viewer HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                       f"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                       f"Sec-WebSocket-Version: 13\r\nX-EXECD-ACCESS-TOKEN: {execd.token}\r\n\r\n").encode())
            if phase != "handshake":
                assert s.recv(12).startswith(b"HTTP/1.1 101")
            if phase == "live":
                deadline = time.monotonic() + TIMEOUT
                got = 0
                while got < 200000 and time.monotonic() < deadline:
                    got += len(s.recv(65536))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        holder.send(b"\x00echo still-$((7*6))\n")
        h.until(lambda: b"still-42" in h.out, "the session after hostile viewers")
    st, js = execd.json("GET", f"/pty/{sid}")
    assert st == 200 and js["running"] is True
    st, _ = execd.json("DELETE", f"/pty/{sid}")
    assert st == 200


def test_deleting_a_session_closes_its_viewers(execd):
    sid = create(execd)
    with attach(execd, sid) as holder:
        Reader(holder).until(lambda: True, "nothing")
        with view(execd, sid) as v:
            r = Reader(v)
            r.until(lambda: r.text_of("connected"), "connected")
            st, _ = execd.json("DELETE", f"/pty/{sid}")
            assert st == 200
            r.until_closed()
