"""Helpers for driving a real execd over plain HTTP (no SDK).

`Execd` wraps one running daemon (started by the fixtures in conftest.py).
Everything here waits for conditions (stderr lines, status changes, process
state) with deadlines; nothing sleeps as a means of synchronisation.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOKEN_HEADER = "X-EXECD-ACCESS-TOKEN"
SANITIZED = os.environ.get("EXECD_SANITIZED", "") not in ("", "0", "no", "false")
# Sanitizer builds are several times slower: widen latency limits there.
SLOW = 4.0 if SANITIZED else 1.0
PYTHON = sys.executable
LISTEN_RE = re.compile(r"listening on ([0-9.]+):(\d+)")


def execd_bin() -> str:
    return os.environ.get("EXECD_BIN") or str(ROOT / "build" / "execd")


def wait_until(pred, timeout: float, interval: float = 0.01, what: str = "condition"):
    """Poll `pred` until it returns a truthy value; return that value."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def process_alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def vm_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def pids_with_cmdline(needle: str) -> list[int]:
    """Live (non-zombie) processes whose command line contains `needle`."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{d}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in cmd and state != "Z":
            pids.append(int(d))
    return pids


def process_table() -> list[tuple[int, str, int]]:
    """(pid, state, ppid) of every process, from /proc."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # comm may contain spaces/parens: split after the last ')'
        rest = stat[stat.rfind(")") + 2:].split()
        out.append((int(d), rest[0], int(rest[1])))
    return out


def children_of(pid: int) -> list[tuple[int, str]]:
    """(pid, state) of every process whose parent is `pid`."""
    return [(p, state) for p, state, ppid in process_table() if ppid == pid]


class StderrPump(threading.Thread):
    """Drains a child's stderr into a list of lines and signals the listen line."""

    def __init__(self, proc: subprocess.Popen):
        super().__init__(daemon=True)
        self.proc = proc
        self.lines: list[str] = []
        self.port: int | None = None
        self.host: str | None = None
        self.ready = threading.Event()
        self.cond = threading.Condition()

    def run(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace")
            with self.cond:
                self.lines.append(line)
                if self.port is None:
                    m = LISTEN_RE.search(line)
                    if m:
                        self.host, self.port = m.group(1), int(m.group(2))
                        self.ready.set()
                self.cond.notify_all()
        with self.cond:
            self.ready.set()  # EOF: wake waiters (port stays None)
            self.cond.notify_all()

    def text(self) -> str:
        with self.cond:
            return "".join(self.lines)


@dataclass
class Result:
    """A parsed /command stream."""

    events: list[dict]
    raw: bytes
    status: int
    headers: dict
    stdout: bytes = b""
    stderr: bytes = b""

    @property
    def terminal(self) -> dict:
        for ev in reversed(self.events):
            if ev["type"] in ("execution_complete", "error"):
                return ev
        raise AssertionError(f"no terminal event in {self.events!r}")

    @property
    def id(self) -> str:
        assert self.events and self.events[0]["type"] == "init", self.events[:2]
        return self.events[0]["text"]

    def texts(self, kind: str) -> list[str]:
        return [e["text"] for e in self.events if e["type"] == kind]


def decode_chunk(ev: dict) -> bytes:
    if "b64" in ev:
        assert "text" not in ev, ev
        return base64.b64decode(ev["b64"], validate=True)
    return ev["text"].encode("utf-8")


def reconstruct(events: list[dict]) -> tuple[bytes, bytes]:
    """Concatenate exact-framing chunks per stream, checking offsets are contiguous."""
    bufs = {"stdout": bytearray(), "stderr": bytearray()}
    for ev in events:
        t = ev["type"]
        if t in bufs:
            assert ev["offset"] == len(bufs[t]), (t, ev["offset"], len(bufs[t]))
            chunk = decode_chunk(ev)
            assert chunk, f"empty chunk event {ev!r}"
            bufs[t] += chunk
    return bytes(bufs["stdout"]), bytes(bufs["stderr"])


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


class Execd:
    def __init__(self, proc, pump, token, state_dir, args):
        self.proc = proc
        self.pump = pump
        self.token = token
        self.state_dir = state_dir
        self.args = args
        self.host = pump.host
        self.port = pump.port
        self.base_url = f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr_text(self) -> str:
        return self.pump.text()

    # ---- plain requests -------------------------------------------------
    def headers(self, extra=None, token=True) -> dict:
        h = {}
        if token and self.token is not None:
            h[TOKEN_HEADER] = self.token
        h.update(extra or {})
        return h

    def conn(self, timeout=30) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, token=True, timeout=30):
        """Returns (status, headers(dict, lower-case keys), body bytes)."""
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        c = self.conn(timeout)
        try:
            c.request(method, path, body=body, headers=self.headers(headers, token))
            r = c.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            c.close()

    def json(self, method, path, body=None, **kw):
        st, h, data = self.request(method, path, body, **kw)
        return st, (json.loads(data) if data else None)

    def ping(self) -> int:
        return self.request("GET", "/ping", token=False)[0]

    def status(self, cid):
        return self.json("GET", f"/command/status/{cid}")

    def logs(self, cid, cursor=None):
        q = f"?cursor={cursor}" if cursor is not None else ""
        st, h, data = self.request("GET", f"/command/{cid}/logs{q}")
        return st, h, data

    def wait_finished(self, cid, timeout=20.0) -> dict:
        def done():
            st, js = self.status(cid)
            assert st == 200, (st, js)
            return js if not js["running"] else None
        return wait_until(done, timeout * SLOW, 0.02, f"command {cid} to finish")

    # ---- streams ---------------------------------------------------------
    def open_stream(self, body: dict, exact=False, headers=None, timeout=60):
        c = self.conn(timeout)
        h = {"Content-Type": "application/json"}
        if exact:
            h["Accept"] = "application/x-ndjson"
        h.update(headers or {})
        c.request("POST", "/command", body=json.dumps(body).encode(),
                  headers=self.headers(h))
        return c, c.getresponse()

    def run(self, command=None, exact=False, sock_timeout=60, headers=None, **fields) -> Result:
        """POST /command and read the whole stream; `fields` go into the JSON body."""
        body = dict(fields)
        if command is not None:
            body["command"] = command
        c, r = self.open_stream(body, exact=exact, headers=headers, timeout=sock_timeout)
        try:
            raw = r.read()
        except (TimeoutError, socket.timeout) as e:
            raise AssertionError(f"stream for {body!r} did not end within {sock_timeout}s; "
                                 f"execd stderr tail:\n{self.stderr_text()[-4000:]}") from e
        finally:
            c.close()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        if r.status != 200:
            return Result([], raw, r.status, hdrs)
        exact = hdrs.get("content-type", "").startswith("application/x-ndjson")
        res = Result(parse_stream(raw, exact), raw, r.status, hdrs)
        if exact:
            res.stdout, res.stderr = reconstruct(res.events)
        return res

    # ---- lifecycle ------------------------------------------------------
    def stop(self, timeout=15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout * SLOW)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("execd did not exit within %ss of SIGTERM" % timeout)
        self.pump.join(5)
        return rc


def parse_stream(raw: bytes, exact: bool) -> list[dict]:
    events = []
    if exact:
        assert raw.endswith(b"\n"), raw[-200:]
        for line in raw.split(b"\n")[:-1]:
            assert line, "blank line in exact framing"
            events.append(json.loads(line))
    else:
        assert raw.endswith(b"\n\n"), raw[-200:]
        for block in raw.split(b"\n\n")[:-1]:
            assert block and b"\n" not in block, block[:200]
            events.append(json.loads(block))
    for ev in events:
        assert isinstance(ev.get("type"), str) and isinstance(ev.get("timestamp"), int), ev
    return events


def iter_lines(resp):
    """Yield raw event lines (without '\n') from an http.client response as they arrive."""
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.rstrip(b"\n")
        if line:
            yield line


def start_execd(*extra_args, token="generate", state_dir=None, env=None,
                port=0, host="127.0.0.1", wait=True, binary=None, wrapper=()):
    """Start execd; returns Execd (wait=True) or the raw Popen + pump (wait=False)."""
    import secrets
    import tempfile
    if token == "generate":
        token = secrets.token_hex(16)
    if state_dir is None:
        state_dir = tempfile.mkdtemp(prefix="execd-it-")
    args = [*wrapper, binary or execd_bin(), "--host", host, "--port", str(port),
            "--state-dir", str(state_dir)]
    if token is not None:
        args += ["--access-token", token]
    args += list(extra_args)
    # EXECD_EXTRA_ARGS="--no-cgroups": the whole suite against another mode.
    args += os.environ.get("EXECD_EXTRA_ARGS", "").split()
    e = dict(os.environ if env is None else env)
    e.pop("EXECD_ACCESS_TOKEN", None) if env is None else None
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=e)
    pump = StderrPump(proc)
    pump.start()
    if not wait:
        return proc, pump
    if not pump.ready.wait(20 * SLOW) or pump.port is None:
        proc.kill()
        proc.wait()
        raise AssertionError(f"execd did not report its port; rc={proc.poll()} "
                             f"stderr={pump.text()!r}")
    return Execd(proc, pump, token, state_dir, args)
