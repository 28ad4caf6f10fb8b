"""Small helpers shared by the VM tests: an exact-framing stream reader that
can be resumed by offset, a PTY WebSocket reader, and process listings of
the guest."""
from __future__ import annotations

import ast
import contextlib
import json
import shlex
import time

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

# (pid, state, ppid, cmdline) of every process of the guest, as a repr.
PS = """
import os
out = []
for d in os.listdir('/proc'):
    if d.isdigit():
        try:
            st = open('/proc/%s/stat' % d).read()
            cmd = open('/proc/%s/cmdline' % d, 'rb').read().replace(b'\\0', b' ').decode()
        except OSError:
            continue
        rest = st[st.rfind(')') + 2:].split()
        out.append((int(d), rest[0], int(rest[1]), cmd))
print(repr(out))
"""


def guest_ps(vm) -> list[tuple[int, str, int, str]]:
    events, out = vm.run("exec python3 -c " + shlex.quote(PS))
    return ast.literal_eval(out.decode())


def wait_for(pred, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Stream:
    """An exact-framing command stream (POST /command or GET .../stream),
    read line by line; stdout bytes are checked to be contiguous by offset."""

    def __init__(self, vm, method: str, path: str, body=None, timeout: float = 60):
        self.conn = vm.conn(timeout)
        h = {"X-EXECD-ACCESS-TOKEN": vm.token, "Accept": "application/x-ndjson", "Content-Type": "application/json"}
        self.conn.request(method, path, body=json.dumps(body).encode() if body is not None else None, headers=h)
        self.resp = self.conn.getresponse()
        assert self.resp.status == 200, (self.resp.status, self.resp.read()[:300])
        self.events: list[dict] = []

    def next_event(self) -> dict | None:
        line = self.resp.readline()
        if not line:
            return None
        ev = json.loads(line)
        self.events.append(ev)
        return ev

    def close(self):
        try:
            self.conn.close()
        except OSError:
            pass


def read_stdout_until(stream: Stream, stdout: bytearray, pred, timeout: float) -> dict | None:
    """Appends stdout chunks (checking offsets) until pred(stdout) or the
    terminal event, which it returns."""
    deadline = time.monotonic() + timeout
    while not pred(stdout):
        assert time.monotonic() < deadline, f"stream: condition not met in {timeout}s; have {bytes(stdout[-200:])!r}"
        ev = stream.next_event()
        if ev is None:
            raise ConnectionError("stream ended without a terminal event")
        if ev["type"] == "stdout":
            assert ev["offset"] == len(stdout), (ev["offset"], len(stdout))
            stdout += ev["text"].encode()
        elif ev["type"] in ("execution_complete", "error"):
            return ev
        elif ev["type"] == "gap":
            raise AssertionError(f"unexpected gap {ev}")
    return None


class Pty:
    """A PTY session's WebSocket: 0x01 payloads collected in `out`."""

    def __init__(self, vm, sid: str, **query):
        q = "&".join(f"{k}={v}" for k, v in query.items())
        url = f"ws://127.0.0.1:{vm.port}/pty/{sid}/ws" + (f"?{q}" if q else "")
        self._stack = contextlib.ExitStack()
        self.ws = self._stack.enter_context(connect(url, additional_headers={"X-EXECD-ACCESS-TOKEN": vm.token},
                                                    max_size=None, open_timeout=30))
        self.out = bytearray()
        self.replay = bytearray()
        self.texts: list[dict] = []

    def pump_until(self, pred, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > deadline:
                raise AssertionError(f"PTY: timed out waiting for {what}; out={bytes(self.out[-300:])!r}")
            try:
                m = self.ws.recv(timeout=0.2)
            except TimeoutError:
                continue
            if isinstance(m, bytes):
                if m[0] == 1:
                    self.out += m[1:]
                elif m[0] == 3:
                    self.replay += m[9:]
            else:
                self.texts.append(json.loads(m))

    def send(self, data: bytes):
        self.ws.send(b"\x00" + data)

    def close(self):
        try:
            self._stack.close()
        except (OSError, ConnectionClosed):
            pass
