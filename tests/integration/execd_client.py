"""Helpers for driving a real execd over plain HTTP (no SDK).

`Execd` wraps one running daemon (started by the fixtures in conftest.py).
Everything here waits for conditions (stderr lines, status changes, process
state) with deadlines; nothing sleeps as a means of synchronisation.

Remote mode (`EXECD_REMOTE=http://127.0.0.1:PORT`, `EXECD_REMOTE_TOKEN`):
the daemons run on another machine, e.g. a VM whose PID 1 execd is reached
through a forwarded port (tests/vm). Each test's daemon is then started by
that execd as a background command (`EXECD_REMOTE_BIN`, default /execd) on
a port of its own inside the machine and reached through the PID 1 execd's
`/proxy/{port}` route, which checks the token (the inner daemon runs with
--insecure-no-auth: the proxy never forwards the token). What tests read
from /proc and /sys/fs/cgroup comes from the same machine (`MACHINE`,
functions of sysview.py run there), and PYTHON is that machine's python3.
"""

from __future__ import annotations

import ast
import base64
import builtins
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
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import sysview

ROOT = Path(__file__).resolve().parents[2]
TOKEN_HEADER = "X-EXECD-ACCESS-TOKEN"
SANITIZED = os.environ.get("EXECD_SANITIZED", "") not in ("", "0", "no", "false")
REMOTE = os.environ.get("EXECD_REMOTE", "")
# Sanitizer builds are several times slower, and so is a VM under software
# emulation: widen latency limits there (EXECD_SLOW overrides).
SLOW = float(os.environ.get("EXECD_SLOW") or (4.0 if SANITIZED else 3.0 if REMOTE else 1.0))
PYTHON = os.environ.get("EXECD_REMOTE_PYTHON", "python3") if REMOTE else sys.executable
LISTEN_RE = re.compile(r"listening on ([0-9.]+):(\d+)")


def execd_bin() -> str:
    return os.environ.get("EXECD_BIN") or str(ROOT / "build" / "execd")


def recv_all(s) -> bytes:
    """Read until the peer closes or resets (bounded by the socket timeout)."""
    out = b""
    while True:
        try:
            d = s.recv(65536)
        except ConnectionResetError:
            return out
        if not d:
            return out
        out += d


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


class LocalMachine:
    """This machine: sysview's functions run in-process."""

    remote = False

    def call(self, fn: str, *args):
        return getattr(sysview, fn)(*args)


class RemoteMachine:
    """The machine of the execd at EXECD_REMOTE: each call runs sysview.py's
    function there, as a command of that execd (python3, result as repr)."""

    remote = True
    SCRIPT = "/tmp/execd-sysview.py"

    def __init__(self, url: str, token: str | None):
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.token = u.hostname, u.port or 44772, token
        self.python = PYTHON
        self._installed = False
        self._lock = threading.Lock()

    def headers(self, extra=None) -> dict:
        h = {TOKEN_HEADER: self.token} if self.token else {}
        h.update(extra or {})
        return h

    def request(self, method, path, body=None, timeout=60):
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            c.request(method, path, body=json.dumps(body).encode() if body is not None else None,
                      headers=self.headers({"Content-Type": "application/json"}))
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def run(self, command: str, envs=None, timeout=60, **fields) -> tuple[int | None, bytes, bytes, dict]:
        """Runs a command there to its end: (exit_code, stdout, stderr, terminal event)."""
        body = {"command": command, "envs": envs or {}, **fields}
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            c.request("POST", "/command", body=json.dumps(body).encode(),
                      headers=self.headers({"Content-Type": "application/json", "Accept": "application/x-ndjson"}))
            r = c.getresponse()
            raw = r.read()
        finally:
            c.close()
        assert r.status == 200, (r.status, raw[:500])
        events = parse_stream(raw, True)
        out, err = reconstruct(events)
        term = events[-1]
        return term.get("exit_code"), out, err, term

    def install(self):
        with self._lock:
            if self._installed:
                return
            src = Path(sysview.__file__).read_text() + _SYSVIEW_MAIN
            rc, out, err, _ = self.run(f'printf %s "$SRC" > {self.SCRIPT}', envs={"SRC": src})
            assert rc == 0, (rc, out, err)
            self._installed = True

    def call(self, fn: str, *args):
        self.install()
        # The call travels in the environment, not on the command line, so
        # that the probe never matches a process scan's needle.
        rc, out, err, _ = self.run(f"exec {self.python} {self.SCRIPT}", envs={"SYSVIEW_CALL": repr((fn, args))})
        if rc != 0:
            # A builtin exception there (ProcessLookupError, FileNotFoundError,
            # ...) is raised here as the same type.
            text = err.decode(errors="replace")
            name, _, msg = (text.strip().splitlines() or ["?"])[-1].partition(":")
            cls = getattr(builtins, name.strip(), None)
            if isinstance(cls, type) and issubclass(cls, Exception):
                raise cls(msg.strip())
            raise AssertionError(f"sysview {fn}{args!r} failed there: {text}")
        return ast.literal_eval(out.decode())


_SYSVIEW_MAIN = """

if __name__ == "__main__":
    import sys
    fn, args = eval(os.environ["SYSVIEW_CALL"])
    r = globals()[fn](*args)
    sys.stdout.write(repr(sorted(r) if isinstance(r, set) else r))
"""

MACHINE = RemoteMachine(REMOTE, os.environ.get("EXECD_REMOTE_TOKEN")) if REMOTE else LocalMachine()


def process_alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    if MACHINE.remote:
        return any(p == pid and state != "Z" for p, state, _ in process_table())
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def vm_rss_kib(pid: int) -> int:
    if MACHINE.remote:
        for p, _, _, _, _, rss in MACHINE.call("proc_table", False, True):
            if p == pid:
                return rss
        raise AssertionError(f"no VmRSS for {pid}")
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


# Runs of the suite side by side (tests/run-integration.sh) share the
# machine, and the same test of two runs looks for the same command line at
# the same moment. Locally a run counts only processes below its own test
# process, which conftest makes a child subreaper so that the orphans of an
# execd a test killed stay below it too. (Remote, one run has the guest.)
SCOPE_PID = None if REMOTE else os.getpid()


def _in_scope(pid: int, parent: dict[int, int]) -> bool:
    for _ in range(4096):
        if pid == SCOPE_PID:
            return True
        if pid <= 1:
            return False
        if pid not in parent:
            return True  # its parent went while /proc was read: count it rather than miss it
        pid = parent[pid]
    return True


def pids_with_cmdline(needle: str) -> list[int]:
    """Live (non-zombie) processes whose command line contains `needle`
    (this run's only, see SCOPE_PID)."""
    table = MACHINE.call("proc_table", False, False)
    hits = [pid for pid, state, _, cmd, _, _ in table if needle in cmd and state != "Z"]
    if SCOPE_PID is None or not hits:
        return hits
    parent = {pid: ppid for pid, _, ppid, _, _, _ in table}
    return [pid for pid in hits if _in_scope(pid, parent)]


def process_table() -> list[tuple[int, str, int]]:
    """(pid, state, ppid) of every process, from /proc."""
    return [(pid, state, ppid) for pid, state, ppid, _, _, _ in MACHINE.call("proc_table", False, False)]


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


class _PrefixedConnection(http.client.HTTPConnection):
    """An HTTPConnection whose request paths go under a prefix (/proxy/N)."""

    def __init__(self, host, port, prefix, timeout):
        super().__init__(host, port, timeout=timeout)
        self.prefix = prefix

    def putrequest(self, method, url, *args, **kw):
        return super().putrequest(method, self.prefix + url, *args, **kw)


class Execd:
    def __init__(self, proc, pump, token, state_dir, args, host=None, port=None, prefix=""):
        self.proc = proc
        self.pump = pump
        self.token = token
        self.state_dir = state_dir
        self.args = args
        self.host = host or pump.host
        self.port = port or pump.port
        # Remote mode: the PID 1 execd's /proxy/{inner port} in front of every path.
        self.prefix = prefix
        self.base_url = f"http://{self.host}:{self.port}{prefix}"
        # host:port[/proxy/N], as an SDK endpoint wants it.
        self.endpoint = f"{self.host}:{self.port}{prefix}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr_text(self) -> str:
        return self.pump.text()

    # ---- plain requests -------------------------------------------------
    def headers(self, extra=None, token=True) -> dict:
        h = {}
        # Remote mode: the token is the PID 1 execd's, for its /proxy route,
        # and goes with every request (the inner daemon has none to check).
        if (token or self.prefix) and self.token is not None:
            h[TOKEN_HEADER] = self.token
        h.update(extra or {})
        return h

    def conn(self, timeout=30) -> http.client.HTTPConnection:
        if self.prefix:
            return _PrefixedConnection(self.host, self.port, self.prefix, timeout)
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
        if self.prefix:
            # Remote: the state dir is on the machine's tmpfs (RAM), and retained
            # output adds up over a suite.
            MACHINE.run(f"rm -rf -- '{self.state_dir}'")
        report = sanitizer_report(self.pump.text())
        if report:
            # A daemon that died of it looks like a client-side failure at
            # best (a stream that ends), and one that had exited before the
            # test stops it is not asked for its status.
            raise AssertionError(f"execd {self.args} reported a sanitizer error:\n{report}")
        return rc


_SANITIZER_RE = re.compile(r"^.*(==ERROR: \w+Sanitizer|: runtime error: )", re.M)


def sanitizer_report(stderr: str) -> str:
    """An ASan, LSan or UBSan report in a daemon's stderr, from its first line ('' if none)."""
    m = _SANITIZER_RE.search(stderr)
    return stderr[m.start():m.start() + 6000] if m else ""


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
    if REMOTE:
        return start_remote_execd(*extra_args, token=token, state_dir=state_dir, env=env,
                                  wait=wait, binary=binary, wrapper=wrapper)
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
    # EXECD_EXTRA_ARGS="--no-cgroups": the whole suite against another mode
    # (before a "--", which starts an --init entrypoint's argv).
    extra = list(extra_args)
    cut = extra.index("--") if "--" in extra else len(extra)
    args += extra[:cut] + os.environ.get("EXECD_EXTRA_ARGS", "").split() + extra[cut:]
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


# ---- remote mode ------------------------------------------------------------

class RemoteProc:
    """Popen's surface for a daemon that is a background command of the
    remote PID 1 execd: its status there says when and how it ended."""

    def __init__(self, machine: RemoteMachine, cid: str, pid: int, args):
        self.machine, self.cid, self.pid, self.args = machine, cid, pid, args
        self.returncode = None

    def poll(self):
        if self.returncode is None:
            st, body = self.machine.request("GET", f"/command/status/{self.cid}")
            assert st == 200, (st, body)
            js = json.loads(body)
            if not js["running"]:
                sig = js.get("signal")
                self.returncode = -getattr(signal, sig).value if sig else js["exit_code"]
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, sig):
        if self.poll() is None:
            try:
                self.machine.call("kill", self.pid, int(sig))
            except ProcessLookupError:
                pass

    def kill(self):
        self.send_signal(signal.SIGKILL)


class RemotePump:
    """StderrPump's surface: the daemon's output as the remote execd retained it."""

    def __init__(self, machine: RemoteMachine, cid: str):
        self.machine, self.cid = machine, cid

    def text(self) -> str:
        st, body = self.machine.request("GET", f"/command/{self.cid}/logs")
        return body.decode("utf-8", "replace") if st == 200 else f"(logs: {st} {body[:200]!r})"

    def join(self, timeout=None):
        pass


def start_remote_execd(*extra_args, token="generate", state_dir=None, env=None, wait=True,
                       binary=None, wrapper=()):
    """A daemon inside the remote machine, started by its PID 1 execd.

    It moves itself to the root cgroup first when the machine is on cgroup
    v2 (where the PID 1 execd sits too, exempt from the no-internal-process
    rule), so its commands get controllers as the PID 1 execd's do."""
    import pytest
    import shlex
    import uuid
    if wrapper or binary or not wait:
        pytest.skip("starts a local process (wrapper, other binary or raw Popen): not in remote mode")
    m = MACHINE
    state_dir = f"/tmp/execd-it-{uuid.uuid4().hex[:12]}"
    args = [os.environ.get("EXECD_REMOTE_BIN", "/execd"), "--host", "127.0.0.1", "--port", "0",
            "--state-dir", state_dir, "--insecure-no-auth", *extra_args,
            *os.environ.get("EXECD_EXTRA_ARGS", "").split()]
    cid = f"it-{uuid.uuid4().hex[:16]}"
    launch = ("[ -f /sys/fs/cgroup/cgroup.controllers ] && echo $$ > /sys/fs/cgroup/cgroup.procs; "
              "echo launched $$; exec " + " ".join(shlex.quote(a) for a in args) + " 2>&1")
    # A test's env is this process's environment plus its own variables:
    # only those go there (the machine has its own PATH, HOME, ...).
    env = {k: v for k, v in (env or {}).items() if os.environ.get(k) != v}
    m.run(launch, envs=env, background=True, id=cid)

    def launched():
        if m.request("GET", f"/command/status/{cid}")[0] == 200 and RemoteProc(m, cid, 0, args).poll() is not None:
            raise AssertionError(f"remote execd exited: {RemotePump(m, cid).text()[-3000:]}")
        body = m.request("GET", f"/command/{cid}/logs")[1].decode(errors="replace")
        pid, listen = re.search(r"launched (\d+)", body), LISTEN_RE.search(body)
        return (int(pid.group(1)), int(listen.group(2))) if pid and listen else None
    pid, port = wait_until(launched, 20 * SLOW, 0.05, "the remote daemon to listen")
    proc = RemoteProc(m, cid, pid, args)
    pump = RemotePump(m, cid)
    ex = Execd(proc, pump, m.token, state_dir, args, host=m.host, port=m.port, prefix=f"/proxy/{port}")

    def up():
        if proc.poll() is not None:
            raise AssertionError(f"remote execd exited {proc.returncode}: {pump.text()[-3000:]}")
        try:
            return ex.request("GET", "/ping", token=True, timeout=10)[0] == 200
        except OSError:
            return False
    wait_until(up, 20 * SLOW, 0.05, f"the remote execd on port {port} to answer /ping")
    return ex
