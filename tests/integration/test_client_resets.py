"""A hostile client that resets (SO_LINGER 0, then close: the kernel sends
RST) or plainly closes its TCP connection at every phase of every stream
type, over raw sockets so the timing is exact.

Stream types: /command foreground (compat and exact framing), /command
background, /session/{id}/run, /pty/{id}/ws, GET /files/download, POST
/files/upload, GET /command/{id}/logs. Phases: right after the request
(before the response head is written), after the head, mid-body, at the
terminal event, while a write is pending (the client reads nothing, so the
socket buffers are full), and during the WebSocket hand-over. Also: garbage
after a request head, pipelined junk behind a running command, and clients
without the token.

The bugs these guard against are timing dependent, so every scenario loops
many times; hang-ups that race with execd's own work are swept across the
race window. After each iteration execd must be alive and must not have
printed a sanitizer report (a UBSan report that does not kill it counts).
After the loop the abandoned commands are waited for (their output and exit
reach a stream whose client is gone: that is when several bugs strike), then
execd must still serve (GET /ping answers 200 and `echo ok` completes with
exit 0); at teardown it must exit 0 on SIGTERM and leave no process behind.
When execd dies, the failure message carries its sanitizer report.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import re
import socket
import struct
import subprocess
import termios
import time
from urllib.parse import quote

import pytest

from execd_client import SLOW, TOKEN_HEADER, process_alive, process_table, wait_until

MiB = 1024 * 1024
TIMEOUT = 5 * SLOW
LOG_LIMIT = 4 * MiB
# Loop counts: enough to hit the races reliably, small enough that the whole
# file stays around a minute against the sanitizer build.
N = 40
N_RACE = 80     # hang-ups swept across a race window
N_HEAVY = 16
BIG_OUTPUT = "head -c 50000000 /dev/zero | base64"   # 67 MB of base64 lines


# ---- the daemon, its health, its leftovers ---------------------------------------------------------

def crash_report(ex) -> str:
    """The sanitizer report in execd's stderr if there is one, else the tail."""
    text = ex.stderr_text()
    for marker in ("==ERROR: ", "runtime error:", "AddressSanitizer", "SUMMARY:"):
        i = text.find(marker)
        if i >= 0:
            start = text.rfind("\n", 0, max(0, i - 200)) + 1
            return text[start:start + 8000]
    return text[-3000:]


SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer")


def assert_alive(ex, where: str, grace: float = 0.0):
    """execd runs and has reported no sanitizer error. With `grace` (used
    when a request just failed), first gives a dying execd time to finish its
    report and exit."""
    if grace:
        deadline = time.monotonic() + grace
        while (ex.proc.poll() is None and time.monotonic() < deadline
               and not any(m in ex.stderr_text() for m in SANITIZER_MARKERS)):
            time.sleep(0.02)
        try:
            ex.proc.wait(grace)   # a report has begun: let it finish
        except subprocess.TimeoutExpired:
            pass
    rc = ex.proc.poll()
    if rc is not None:
        raise AssertionError(f"execd died (exit status {rc}) {where}; stderr:\n{crash_report(ex)}")
    if any(m in ex.stderr_text() for m in SANITIZER_MARKERS):
        raise AssertionError(f"execd reported a sanitizer error {where}; stderr:\n{crash_report(ex)}")


def assert_serving(ex, where: str = "after the loop"):
    """GET /ping answers 200 and a fresh `echo ok` completes with exit code 0."""
    assert_alive(ex, where)
    try:
        assert ex.ping() == 200
        res = ex.run("echo ok", sock_timeout=TIMEOUT)
    except Exception as e:
        assert_alive(ex, f"{where} (while checking it: {e!r})", grace=SLOW)
        raise
    assert res.status == 200, (res.status, res.raw[:300])
    assert res.texts("stdout") == ["ok"], res.events
    assert res.terminal["exit_code"] == 0, res.terminal
    assert_alive(ex, where)


def hammer(ex, n: int, once, label: str, settle: bool = True):
    """Runs `once(i)` n times; after each, execd must still be running. With
    `settle`, then waits until every process execd started has ended (the
    abandoned commands finish while nobody listens: that is when some of the
    bugs strike). Finally execd must still serve."""
    for i in range(n):
        where = f"after {label} iteration {i}"
        try:
            once(i)
        except Exception as e:
            assert_alive(ex, f"{where} (the iteration raised {e!r})", grace=SLOW)
            raise
        assert_alive(ex, where)
    if settle:
        settle_down(ex, label)
    assert_serving(ex, f"after {n} iterations of {label}")
    if settle:
        # A command whose spawn was still queued may have started only now.
        settle_down(ex, label)
        assert_alive(ex, f"after the commands of {label} finished")


def settle_down(ex, label: str):
    """Waits until every process execd started has ended."""
    def settled():
        assert_alive(ex, f"while the commands of {label} finished")
        return not [p for p in descendants(ex.pid) if process_alive(p)]
    wait_until(settled, 30 * SLOW, 0.02, f"the commands of {label} to finish")


def descendants(pid: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for p, _state, ppid in process_table():
        kids.setdefault(ppid, []).append(p)
    out, todo = set(), [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            if k not in out:
                out.add(k)
                todo.append(k)
    return out


@pytest.fixture
def ex(execd_factory):
    """A fresh execd; at teardown it must exit 0 on SIGTERM and every process
    it had started must be gone."""
    e = execd_factory("--log-limit", str(LOG_LIMIT))
    yield e
    # (a death or a sanitizer report during the test already failed it)
    was_alive = e.proc.poll() is None
    reported = any(m in e.stderr_text() for m in SANITIZER_MARKERS)
    procs = descendants(e.pid) if was_alive else set()
    rc = e.stop()
    if was_alive and not reported:
        assert rc == 0, f"execd exited {rc} after SIGTERM; stderr:\n{crash_report(e)}"
    wait_until(lambda: not [p for p in procs if process_alive(p)], 10 * SLOW,
               what=f"execd's processes {sorted(p for p in procs if process_alive(p))} to be gone")


# ---- raw sockets ------------------------------------------------------------------------------------

def dial(ex, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # before connect: a small window
    s.settimeout(TIMEOUT)
    s.connect((ex.host, ex.port))
    return s


def reset(s: socket.socket):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def hang_up(s: socket.socket, how: str):
    if how == "reset":
        reset(s)
    else:
        s.close()


def alternate(i: int) -> str:
    return "reset" if i % 2 == 0 else "close"


def sweep(i: int):
    """Moves the hang-up across a race window of a few milliseconds (e.g.
    between execd reading a request and starting its stream). This does not
    synchronise anything: the test is correct with any delay; the sweep only
    makes each timing occur within the loop."""
    time.sleep((i % 20) * 0.001 * SLOW ** 0.5)


def request(ex, method: str, path: str, body: bytes = b"", headers: dict | None = None,
            token: str | bool = True, length: int | None = None) -> bytes:
    h = {"Host": "t"}
    if token is True:
        h[TOKEN_HEADER] = ex.token
    elif token is not False:
        h[TOKEN_HEADER] = token  # a wrong or empty token
    if body or method in ("POST", "PUT") or length is not None:
        h["Content-Length"] = str(len(body) if length is None else length)
    h.update(headers or {})
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    return head.encode() + body


def command_request(ex, command: str, exact=False, background=False, token: str | bool = True) -> bytes:
    body = {"command": command}
    if background:
        body["background"] = True
    h = {"Content-Type": "application/json"}
    if exact:
        h["Accept"] = "application/x-ndjson"
    return request(ex, "POST", "/command", json.dumps(body).encode(), h, token)


def recv_until(s: socket.socket, buf: bytearray, pred, what: str) -> bool:
    """Reads into `buf` until pred(buf); False if the server closed first."""
    deadline = time.monotonic() + TIMEOUT
    while not pred(buf):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; got {bytes(buf[:300])!r}…")
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            d = s.recv(65536)
        except ConnectionResetError:
            return False
        except TimeoutError:
            raise AssertionError(f"timed out waiting for {what}; got {bytes(buf[:300])!r}…") from None
        if not d:
            return False
        buf += d
    return True


def has_head(buf) -> bool:
    return b"\r\n\r\n" in buf


def body_len(buf) -> int:
    i = bytes(buf).find(b"\r\n\r\n")
    return -1 if i < 0 else len(buf) - i - 4


def status_of(buf) -> int:
    return int(bytes(buf).split(b" ", 2)[1])


def read_to_eof(s: socket.socket) -> bytes:
    out = bytearray()
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        try:
            d = s.recv(65536)
        except ConnectionResetError:
            break
        if not d:
            break
        out += d
    else:
        raise AssertionError(f"server did not close; got {bytes(out[:300])!r}")
    return bytes(out)


def _queues(port_a: int, port_b: int) -> tuple[int, int] | None:
    """(tx_queue, rx_queue) of the loopback socket local port_a -> remote port_b."""
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            p = line.split()
            local, remote, queues = p[1], p[2], p[4]
            if int(local.split(":")[1], 16) == port_a and int(remote.split(":")[1], 16) == port_b:
                tx, rx = queues.split(":")
                return int(tx, 16), int(rx, 16)
    return None


def wait_write_pending(ex, s: socket.socket, what: str):
    """Waits until the server's writes to `s` are stuck: our receive queue
    holds data we do not read and execd's socket has unsent bytes queued
    behind the closed window."""
    mine = s.getsockname()[1]

    def stuck():
        server = _queues(ex.port, mine)
        unread = struct.unpack("i", fcntl.ioctl(s, termios.FIONREAD, b"\0\0\0\0"))[0]
        return server is not None and server[0] >= 16384 and unread > 0

    wait_until(stuck, TIMEOUT, 0.01, f"execd's writes to be pending ({what})")


# ---- /command foreground ------------------------------------------------------------------------------

TERMINAL = (b'"type":"execution_complete"', b'"type":"error"')
FOREGROUND_PHASES = {
    # phase: (command, what to read before hanging up)
    "before-head": ("sleep 0.05; echo x", lambda b: True),
    "racing-head": ("true", lambda b: True),
    "after-head": ("seq 1 2000", has_head),
    "mid-body": ("for i in $(seq 1 20000); do echo line $i; done", lambda b: body_len(b) >= 4096),
    "at-terminal": ("echo t", lambda b: any(t in b for t in TERMINAL)),
}


@pytest.mark.parametrize("framing", ["compat", "exact"])
@pytest.mark.parametrize("phase", list(FOREGROUND_PHASES))
def test_command_foreground(ex, phase, framing):
    command, enough = FOREGROUND_PHASES[phase]

    def once(i):
        s = dial(ex)
        s.sendall(command_request(ex, command, exact=framing == "exact"))
        buf = bytearray()
        assert recv_until(s, buf, enough, phase), bytes(buf[-300:])
        if phase in ("before-head", "racing-head"):
            sweep(i)
        hang_up(s, alternate(i))

    hammer(ex, N_RACE if phase in ("before-head", "racing-head") else N, once, f"{phase}/{framing}")


def test_command_immediate_plain_close(ex):
    """Known crash: POST /command and close at once (FIN, not RST)."""
    def once(i):
        s = dial(ex)
        s.sendall(command_request(ex, "echo x; sleep 0.02; echo y" if i % 3 else "echo x", exact=i % 2 == 1))
        sweep(i)
        s.close()

    hammer(ex, N_RACE, once, "immediate close")


@pytest.mark.parametrize("framing", ["compat", "exact"])
def test_command_reset_while_write_pending(ex, framing):
    """A 67 MB command, a client that reads only the head and first event and
    then nothing, so execd's writes back up; then a reset."""
    def once(i):
        s = dial(ex, rcvbuf=4096)
        s.sendall(command_request(ex, BIG_OUTPUT, exact=framing == "exact"))
        buf = bytearray()
        init = re.compile(rb'"type":"init","text":"([^"]+)"')
        assert recv_until(s, buf, lambda b: init.search(b), "init event")
        cid = init.search(bytes(buf)).group(1).decode()
        wait_write_pending(ex, s, "big command")
        hang_up(s, alternate(i))
        st, _, _ = ex.request("DELETE", f"/command?id={cid}", timeout=TIMEOUT)
        assert st in (200, 204), st
        ex.wait_finished(cid)

    hammer(ex, N_HEAVY, once, f"write pending/{framing}")


def test_pipelined_junk_behind_a_running_command(ex):
    """Known crash: POST /command {sleep 1}, then 400 KB of junk on the same
    connection without waiting, then a reset."""
    junk = bytes((i * 7 + 3) & 0xFF for i in range(4096)) * 100

    def once(i):
        s = dial(ex)
        s.sendall(command_request(ex, "sleep 1"))
        try:
            s.sendall(junk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # execd may refuse the junk early: fine
        hang_up(s, alternate(i) if i % 4 < 2 else "reset")

    hammer(ex, N, once, "pipelined junk")


def test_garbage_after_the_head(ex):
    """Garbage where a body or the next request should be: a 400 (or the
    stream, then a 400 and a close), never a crash."""
    def once(i):
        kind = i % 4
        s = dial(ex)
        if kind == 0:    # garbage as the JSON body
            s.sendall(request(ex, "POST", "/command", bytes(range(256)) * 4,
                              {"Content-Type": "application/json"}))
        elif kind == 1:  # a valid command, then a non-HTTP "request"
            s.sendall(command_request(ex, "echo g") + b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"
                      + os.urandom(512))
        elif kind == 2:  # a GET, then binary noise
            s.sendall(request(ex, "GET", "/ping") + b"\x00\xff" * 300 + b"\r\n\r\n")
        else:            # a body longer than announced
            s.sendall(request(ex, "POST", "/command", b'{"command":"echo x"}' + os.urandom(2000),
                              {"Content-Type": "application/json"}, length=20))
        if i % 8 < 4:
            buf = bytearray()       # whatever comes first, the garbage gets a 400
            assert recv_until(s, buf, lambda b: b"HTTP/1.1 400 " in b, "a 400"), bytes(buf[:300])
            s.close()
        else:
            hang_up(s, "reset")

    hammer(ex, N, once, "garbage after the head")


# ---- /command background ------------------------------------------------------------------------------

BACKGROUND_PHASES = {
    "before-head": lambda b: True,
    "after-head": has_head,
    "at-terminal": lambda b: b'"type":"execution_complete"' in b,
}


@pytest.mark.parametrize("phase", list(BACKGROUND_PHASES))
def test_command_background(ex, phase):
    enough = BACKGROUND_PHASES[phase]

    def once(i):
        s = dial(ex)
        s.sendall(command_request(ex, "echo bg; sleep 0.05", background=True, exact=i % 3 == 0))
        buf = bytearray()
        assert recv_until(s, buf, enough, phase), bytes(buf[-300:])
        if phase == "before-head":
            sweep(i)
        hang_up(s, alternate(i))

    hammer(ex, N_RACE if phase == "before-head" else N, once, f"background {phase}")


# ---- /session/{id}/run --------------------------------------------------------------------------------

def new_session(ex) -> str:
    st, js = ex.json("POST", "/session", {}, timeout=TIMEOUT)
    assert st in (200, 201), (st, js)
    return js["session_id"]


def end_session(ex, sid: str, settle: bool):
    """With `settle`, first waits for the abandoned run to end (a run of `true`
    is accepted instead of 409), so it streamed to the dead client all along."""
    if settle:
        def idle():
            st, _, _ = ex.request("POST", f"/session/{sid}/run", {"command": "true"}, timeout=TIMEOUT)
            assert st in (200, 409), st
            return st == 200
        wait_until(idle, 20 * SLOW, 0.02, f"session {sid} to finish its run")
    st, _, _ = ex.request("DELETE", f"/session/{sid}", timeout=TIMEOUT)
    assert st == 200, st


SESSION_PHASES = {
    "before-head": ("echo x", lambda b: True),
    "after-head": ("seq 1 2000", has_head),
    "mid-body": ("for i in $(seq 1 20000); do echo line $i; done", lambda b: body_len(b) >= 4096),
    "at-terminal": ("echo t", lambda b: any(t in b for t in TERMINAL)),
}


@pytest.mark.parametrize("phase", list(SESSION_PHASES))
def test_session_run(ex, phase):
    command, enough = SESSION_PHASES[phase]

    def once(i):
        sid = new_session(ex)
        s = dial(ex)
        s.sendall(request(ex, "POST", f"/session/{sid}/run", json.dumps({"command": command}).encode(),
                          {"Content-Type": "application/json"}))
        buf = bytearray()
        assert recv_until(s, buf, enough, phase), bytes(buf[-300:])
        if phase == "before-head":
            sweep(i)
        hang_up(s, alternate(i))
        end_session(ex, sid, settle=i % 4 < 2)

    hammer(ex, {"mid-body": N_HEAVY, "before-head": N_RACE}.get(phase, N // 2), once, f"session {phase}")


def test_session_run_reset_while_write_pending(ex):
    def once(i):
        sid = new_session(ex)
        s = dial(ex, rcvbuf=4096)
        s.sendall(request(ex, "POST", f"/session/{sid}/run", json.dumps({"command": BIG_OUTPUT}).encode(),
                          {"Content-Type": "application/json"}))
        buf = bytearray()
        assert recv_until(s, buf, has_head, "head")
        wait_write_pending(ex, s, "session run")
        hang_up(s, alternate(i))
        end_session(ex, sid, settle=False)

    hammer(ex, N_HEAVY // 2, once, "session write pending")


# ---- /pty/{id}/ws -------------------------------------------------------------------------------------

def new_pty(ex) -> str:
    st, js = ex.json("POST", "/pty", {}, timeout=TIMEOUT)
    assert st == 201, (st, js)
    return js["session_id"]


def delete_pty(ex, sid: str):
    st, _, _ = ex.request("DELETE", f"/pty/{sid}", timeout=TIMEOUT)
    assert st in (200, 404), st


def ws_handshake(ex, sid: str, query: str = "", token: str | bool = True) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return request(ex, "GET", f"/pty/{sid}/ws{query}", headers={
        "Upgrade": "websocket", "Connection": "Upgrade",
        "Sec-WebSocket-Key": key, "Sec-WebSocket-Version": "13"}, token=token)


def ws_frame(payload: bytes, opcode: int = 2) -> bytes:
    """One masked client frame."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    mask = os.urandom(4)
    return head + mask + bytes(b ^ mask[k % 4] for k, b in enumerate(payload))


def stdin(data: bytes) -> bytes:
    return ws_frame(b"\x00" + data)


def attach(ex, sid, query="", rcvbuf=None) -> tuple[socket.socket, bytearray]:
    """Attaches and reads the 101 and the `connected` frame."""
    s = dial(ex, rcvbuf)
    s.sendall(ws_handshake(ex, sid, query))
    buf = bytearray()
    assert recv_until(s, buf, lambda b: has_head(b) and b'"connected"' in b, "101 and connected"), bytes(buf)
    assert buf.startswith(b"HTTP/1.1 101"), bytes(buf[:200])
    return s, buf


def pty_handshake_then_hang_up(ex, sid, i):
    """Known crash: the handshake, then a reset before reading the 101."""
    s = dial(ex)
    s.sendall(ws_handshake(ex, sid, "?pty=0" if i % 3 == 2 else ""))
    if i % 4 == 3:
        sweep(i)
    hang_up(s, alternate(i))


def pty_after_101(ex, sid, i):
    s = dial(ex)
    s.sendall(ws_handshake(ex, sid))
    buf = bytearray()
    assert recv_until(s, buf, has_head, "101")
    hang_up(s, alternate(i))


def pty_after_connected(ex, sid, i):
    s, _ = attach(ex, sid)
    hang_up(s, alternate(i))


def pty_stdin_exit(ex, sid, i):
    """Attach (101 and `connected` read), send `exit`, hang up at once (or
    once the terminal has echoed it, or across a sweep) so the shell's exit
    and the hang-up reach execd together."""
    s, buf = attach(ex, sid)
    s.sendall(stdin(b"exit\n"))
    if i % 3 == 1:
        recv_until(s, buf, lambda b: b"exit\r\n" in b, "the echo of exit")
    elif i % 3 == 2:
        sweep(i)
    hang_up(s, alternate(i // 3))


def pty_handshake_and_exit_together(ex, sid, i):
    """Known crash: the handshake and a stdin `exit` (in one write or two),
    then a hang-up without reading anything: the connection dies during the
    hand-over and the shell's output and exit are then sent through it."""
    s = dial(ex)
    if i % 2:
        s.sendall(ws_handshake(ex, sid) + stdin(b"exit\n"))
    else:
        s.sendall(ws_handshake(ex, sid))
        s.sendall(stdin(b"exit\n"))
    hang_up(s, alternate(i // 2))


def pty_mid_output(ex, sid, i):
    s, buf = attach(ex, sid)
    s.sendall(stdin(b"seq 1 200000\n"))
    n = len(buf)
    assert recv_until(s, buf, lambda b: len(b) - n >= 8192, "output frames")
    hang_up(s, alternate(i))


def pty_close_frame(ex, sid, i):
    s, _ = attach(ex, sid)
    s.sendall(stdin(b"seq 1 1000\n") + ws_frame(struct.pack("!H", 1000), opcode=8))
    hang_up(s, alternate(i))


def pty_garbage(ex, sid, i):
    """Bytes that are not a valid (masked) frame: execd closes with 1002."""
    s, _ = attach(ex, sid)
    s.sendall(b"\x82\x05hello" + os.urandom(64))   # unmasked: a protocol error
    if i % 2:
        read_to_eof(s)
        s.close()
    else:
        hang_up(s, "reset")


def pty_takeover_race(ex, sid, i):
    """A second client takes over while the first one resets."""
    s1, _ = attach(ex, sid)
    s2 = dial(ex)
    s2.sendall(ws_handshake(ex, sid, "?takeover=1"))
    hang_up(s1, "reset")
    hang_up(s2, alternate(i))


PTY_PHASES = {
    "handshake": pty_handshake_then_hang_up,
    "after-101": pty_after_101,
    "connected": pty_after_connected,
    "stdin-exit": pty_stdin_exit,
    "handshake-with-exit": pty_handshake_and_exit_together,
    "mid-output": pty_mid_output,
    "close-frame": pty_close_frame,
    "garbage": pty_garbage,
    "takeover": pty_takeover_race,
}


@pytest.mark.parametrize("phase", list(PTY_PHASES))
def test_pty_ws(ex, phase):
    scenario = PTY_PHASES[phase]

    def once(i):
        sid = new_pty(ex)
        scenario(ex, sid, i)
        if i % 4 < 2:
            # give the hang-up time to be noticed before the session goes
            st, _ = ex.json("GET", f"/pty/{sid}", timeout=TIMEOUT)
            assert st == 200, st
        delete_pty(ex, sid)

    hammer(ex, N // 2 if phase in ("mid-output", "takeover") else N, once, f"pty {phase}")


def test_pty_ws_reset_while_write_pending(ex):
    def once(i):
        sid = new_pty(ex)
        s, _ = attach(ex, sid, "?pty=0" if i % 2 else "", rcvbuf=4096)
        s.sendall(stdin(BIG_OUTPUT.encode() + b"\n"))
        wait_write_pending(ex, s, "pty output")
        hang_up(s, alternate(i // 2))
        delete_pty(ex, sid)

    hammer(ex, N_HEAVY // 2, once, "pty write pending")


def test_pty_reattach_after_resets(ex):
    """One session, attached and reset over and over: it stays usable."""
    sid = new_pty(ex)

    def once(i):
        # (takeover: execd may not have noticed the previous hang-up yet)
        s = dial(ex)
        s.sendall(ws_handshake(ex, sid, "?takeover=1"))
        buf = bytearray()
        if i % 3:
            assert recv_until(s, buf, lambda b: has_head(b) and (i % 3 == 1 or b'"connected"' in b),
                              "101 and connected"), bytes(buf)
            assert status_of(buf) == 101, bytes(buf[:300])
        hang_up(s, alternate(i))

    hammer(ex, N, once, "pty reattach", settle=False)
    s, buf = attach(ex, sid, "?takeover=1")
    s.sendall(stdin(b"echo alive-$((6*7))\n"))
    assert recv_until(s, buf, lambda b: b"alive-42" in b, "echo after resets")
    s.close()
    delete_pty(ex, sid)
    settle_down(ex, "pty reattach")
    assert_serving(ex)


# ---- GET /files/download ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def big_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("dl") / "big.bin"
    with open(p, "wb") as f:
        block = os.urandom(MiB)
        for _ in range(64):
            f.write(block)
    return p


DOWNLOAD_PHASES = {
    "before-head": (None, lambda b: True),
    "after-head": (None, has_head),
    "mid-body": (None, lambda b: body_len(b) >= MiB),
    "range-mid-body": ("bytes=1000-40000000", lambda b: body_len(b) >= 65536),
    "write-pending": (None, "pending"),
}


@pytest.mark.parametrize("phase", list(DOWNLOAD_PHASES))
def test_download(ex, big_file, phase):
    rng, enough = DOWNLOAD_PHASES[phase]
    path = f"/files/download?path={quote(str(big_file))}"

    def once(i):
        s = dial(ex, rcvbuf=4096 if enough == "pending" else None)
        s.sendall(request(ex, "GET", path, headers={"Range": rng} if rng else None))
        if enough == "pending":
            wait_write_pending(ex, s, "download")
        else:
            buf = bytearray()
            assert recv_until(s, buf, enough, phase), bytes(buf[:300])
        hang_up(s, alternate(i))

    hammer(ex, N_HEAVY if enough == "pending" else N, once, f"download {phase}")


# ---- POST /files/upload -------------------------------------------------------------------------------

def upload_head(ex, target: str, total: int) -> tuple[bytes, bytes]:
    meta = json.dumps({"path": target}).encode()
    prefix = (b"--XyZ\r\nContent-Disposition: form-data; name=\"metadata\"; filename=\"metadata\"\r\n"
              b"Content-Type: application/json\r\n\r\n" + meta + b"\r\n"
              b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n"
              b"Content-Type: application/octet-stream\r\n\r\n")
    suffix = b"\r\n--XyZ--\r\n"
    head = request(ex, "POST", "/files/upload", headers={
        "Content-Type": "multipart/form-data; boundary=XyZ"}, length=len(prefix) + total + len(suffix))
    return head + prefix, suffix


UPLOAD_PHASES = ["head-only", "metadata", "mid-file", "mid-file-large", "whole-body"]


@pytest.mark.parametrize("phase", UPLOAD_PHASES)
def test_upload(ex, tmp_path, phase):
    total = 4 * MiB
    chunk = os.urandom(256 * 1024)

    def once(i):
        target = str(tmp_path / f"t{i}.bin")
        head, suffix = upload_head(ex, target, total)
        s = dial(ex)
        if phase == "head-only":
            s.sendall(head.split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n")
        elif phase == "metadata":
            s.sendall(head)
        elif phase in ("mid-file", "mid-file-large"):
            s.sendall(head)
            for _ in range(1 if phase == "mid-file" else 12):
                s.sendall(chunk)
        else:
            s.sendall(head)
            for _ in range(total // len(chunk)):
                s.sendall(chunk)
            s.sendall(suffix)
        hang_up(s, alternate(i))

    hammer(ex, N_HEAVY if phase in ("mid-file-large", "whole-body") else N, once, f"upload {phase}")
    # Abandoned uploads leave no temporary file behind (a complete one may
    # have been renamed into place).
    wait_until(lambda: all(re.fullmatch(r"t\d+\.bin", f) for f in os.listdir(tmp_path)),
               10 * SLOW, 0.02, f"temporary files to go: {os.listdir(tmp_path)}")


# ---- GET /command/{id}/logs ---------------------------------------------------------------------------

LOGS_PHASES = {
    "before-head": lambda b: True,
    "after-head": has_head,
    "mid-body": lambda b: body_len(b) >= 65536,
    "write-pending": "pending",
}


@pytest.mark.parametrize("phase", list(LOGS_PHASES))
def test_logs(ex, phase):
    enough = LOGS_PHASES[phase]
    done = ex.run("head -c 3000000 /dev/zero | base64", sock_timeout=TIMEOUT)
    assert done.terminal["exit_code"] == 0
    # and one that is still writing while its logs are read
    running = ex.run("head -c 2000000 /dev/zero | base64; sleep 30", background=True, sock_timeout=TIMEOUT)
    # its output all written (it then sleeps), so every phase has bytes to cut into
    wait_until(lambda: len(ex.request("GET", f"/command/{running.id}/logs?cursor=0", timeout=TIMEOUT)[2]) >= 2_700_000,
               10 * SLOW, 0.02, "the running command's output")

    def once(i):
        cid = done.id if i % 2 == 0 else running.id
        s = dial(ex, rcvbuf=4096 if enough == "pending" else None)
        s.sendall(request(ex, "GET", f"/command/{cid}/logs?cursor={i % 3}"))
        if enough == "pending":
            wait_write_pending(ex, s, "logs")
        else:
            buf = bytearray()
            assert recv_until(s, buf, enough, f"{phase} of the logs of {cid} (iteration {i})"), bytes(buf[:300])
        hang_up(s, alternate(i // 2))

    try:
        hammer(ex, N_HEAVY if enough == "pending" else N, once, f"logs {phase}", settle=False)
    finally:
        if ex.proc.poll() is None:
            ex.request("DELETE", f"/command?id={running.id}", timeout=TIMEOUT)
    settle_down(ex, f"logs {phase}")
    assert_serving(ex)


# ---- no token ------------------------------------------------------------------------------------------

def unauthorized_requests(ex) -> list[bytes]:
    # (a refused request's body is still read before the 401, so send it all)
    up_head, up_tail = upload_head(ex, "/tmp/never", 1000)
    upload = up_head + b"u" * 1000 + up_tail
    return [
        command_request(ex, "echo no", token=False),
        command_request(ex, "echo no", token="wrong-token"),
        command_request(ex, "echo no", background=True, token=False),
        request(ex, "POST", "/session", b"{}", token=False),
        request(ex, "POST", "/session/x/run", b'{"command":"echo no"}', token="wrong"),
        request(ex, "POST", "/pty", b"{}", token=False),
        ws_handshake(ex, "x", token=False),
        ws_handshake(ex, "x", token="wrong"),
        request(ex, "GET", "/files/download?path=/etc/passwd", token=False),
        upload.replace(ex.token.encode(), b"wrong"),
        request(ex, "GET", "/command/x/logs", token=False),
        request(ex, "DELETE", "/command?id=x", token=""),
    ]


def hammer_without_token(ex, reqs, label: str, settle: bool = True):
    """Each request without a valid token, four times over: half the time
    read the 401, else hang up (reset or close) right after sending."""
    def once(i):
        req = reqs[i % len(reqs)]
        s = dial(ex)
        s.sendall(req)
        if i // len(reqs) % 2 == 0:
            buf = bytearray()
            assert recv_until(s, buf, has_head, f"401 to {req[:60]!r}"), (req[:80], bytes(buf))
            assert status_of(buf) == 401, (req[:200], bytes(buf[:300]))
            s.close()
        else:
            hang_up(s, "reset" if i % 3 else "close")

    hammer(ex, 4 * len(reqs), once, label, settle=settle)


def test_no_token_gets_401_and_never_crashes(ex):
    hammer_without_token(ex, unauthorized_requests(ex), "no token")
