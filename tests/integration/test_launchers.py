"""Every wait of execd's loop on a child (pty/vm_child), written as the
attacks on it. execd runs inside a sandbox whose own processes, root or
not, are the adversary: a process that stops a child execd starts before
its exec (SIGSTOP racing new pids, a debugger, a tracer) stopped execd's
loop with it, as vfork waits in the kernel for the child's exec or exit:
/ping and every other connection hung until the child was let go of.

Throughout, /ping answers within PING_LIMIT (a pinger in a process of its
own measures every answer); the start that met the stopped child fails
with a message that says so, and the next one runs. The tracer is strace
(`-e inject=SYSCALL:delay_enter=...` holds a tracee in a tracing stop,
state t, for as long as it says), following execd's children.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time

import pytest

from execd_client import MACHINE, SLOW, wait_until

# /ping within 100 ms while a child is stopped. Sanitized daemons are several times slower in everything they do, so the
# limit widens there (the bounds in execd are the same).
PING_LIMIT = 0.1 * (2 if SLOW > 1 else 1)
# How long strace holds a tracee: far past every bound in execd, so that a
# wait without a deadline shows as a /ping of seconds.
STALL_US = 5_000_000
# With strace following execd itself, every system call of the daemon (and
# of the child before its exec: an isolated holder makes a hundred mounts)
# stops for the tracer: slower, but nowhere near the stall.
TRACED_DAEMON_PING_LIMIT = 1.0

PINGER = r"""
import select, socket, sys, time
host, port, path, token = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
req = ("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n" % (path, host)
       + ("%s: %s\r\n" % ("X-EXECD-ACCESS-TOKEN", token) if token else "") + "\r\n").encode()
# A fresh connection per /ping, as an SDK call makes, every 5 ms until stdin
# closes; each one's time (-1: failed) on a line of its own.
while not select.select([sys.stdin], [], [], 0.005)[0]:
    t = time.monotonic()
    ok = False
    try:
        s = socket.create_connection((host, port), timeout=60)
        s.sendall(req)
        data = b""
        while True:
            d = s.recv(4096)
            if not d:
                break
            data += d
        s.close()
        ok = data.startswith(b"HTTP/1.1 200")
    except OSError:
        pass
    print(time.monotonic() - t if ok else -1.0, flush=True)
"""


class Pinger:
    """Pings execd from a process of its own (no GIL shared with the test)
    for as long as the `with` block runs, and at least `at_least` times;
    `latencies` then holds every one. A start that waits on a stopped child
    holds the loop for longer than the pings are apart, so pings land in it."""

    def __init__(self, ex, at_least: int = 10):
        self.ex = ex
        self.at_least = at_least
        self.latencies: list[float] = []

    def _read(self):
        for line in self.proc.stdout:
            self.latencies.append(float(line))

    def __enter__(self):
        token = self.ex.token if self.ex.prefix else ""
        self.proc = subprocess.Popen([sys.executable, "-c", PINGER, self.ex.host, str(self.ex.port),
                                      self.ex.prefix + "/ping", token or ""],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        wait_until(lambda: self.latencies, 10 * SLOW, what="the first /ping")  # the baseline
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            wait_until(lambda: len(self.latencies) >= self.at_least, 10 * SLOW, what="pings")
        self.proc.stdin.close()
        self.proc.wait(60)
        self.reader.join(10)
        return False

    def check(self, what: str, limit: float = None):
        limit = limit or PING_LIMIT
        failed = sum(1 for x in self.latencies if x < 0)
        assert failed == 0, f"{failed} of {len(self.latencies)} /ping failed {what}"
        worst = max(self.latencies)
        print(f"{what}: worst /ping {worst * 1000:.1f} ms of {len(self.latencies)}")
        assert worst < limit, (f"/ping took {worst * 1000:.0f} ms {what} (limit {limit * 1000:.0f} ms); "
                               f"the slowest: {[round(x * 1000, 1) for x in sorted(self.latencies)[-5:]]} ms "
                               f"of {len(self.latencies)}")


def starts(ex) -> dict:
    st, js = ex.json("GET", "/activity")
    assert st == 200, js
    return js["starts"]


def proc_field(pid: int, name: str) -> str | None:
    try:
        text = MACHINE.call("read_text", f"/proc/{pid}/status")
    except Exception:
        return None
    for line in text.splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    return None


def run_ok(ex, i: int):
    """A command whose output proves it ran: `echo $((i * 7))`."""
    r = ex.run(f"echo $(({i} * 7))", exact=True, sock_timeout=20 * SLOW)
    assert r.status == 200, r.raw[-500:]
    assert r.terminal.get("exit_code") == 0, r.terminal
    assert r.stdout == f"{i * 7}\n".encode(), r.stdout
    return r


# ---- a tracer at each phase -------------------------------------------------------------------------------

def strace_available() -> bool:
    return not MACHINE.remote and shutil.which("strace") is not None


class Tracer:
    """strace attached to `pids` (with -f: and to what they start), with one
    -e inject rule; stopped (it detaches) at the end of the `with` block."""

    def __init__(self, pids: list[int], inject: str, follow: bool = False):
        self.pids, self.inject, self.follow = pids, inject, follow

    def __enter__(self):
        cmd = ["strace", "-qq", "-o", "/dev/null"] + (["-f"] if self.follow else []) + ["-e", f"inject={self.inject}"]
        for p in self.pids:
            cmd += ["-p", str(p)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_until(lambda: all((proc_field(p, "TracerPid") or "0") != "0" for p in self.pids) or
                   self.proc.poll() is not None, 10 * SLOW, what="strace to attach")
        assert self.proc.poll() is None, self.proc.stderr.read()
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(30)
        return False


# ---- the children execd starts itself ------------------------------------------------------------------

@pytest.mark.parametrize("flags", [("--cgroup-spares", "0"), ("--no-cgroups",)], ids=["no-spares", "no-cgroups"])
def test_a_child_execd_starts_itself_stalled_before_its_exec_is_given_up_on(execd_factory, flags):
    # The child of a start without a launcher (a vfork child before) held at
    # its execve by a tracer that follows execd's children: strace -f on
    # execd itself (every system call of the daemon stops for the tracer,
    # which slows it, but never for long).
    if not strace_available():
        pytest.skip("needs strace on this machine")
    ex = execd_factory(*flags)
    run_ok(ex, 1)
    with Tracer([ex.pid], f"execve:delay_enter={STALL_US}", follow=True):
        with Pinger(ex) as ping:
            t0 = time.monotonic()
            r = ex.run("echo never", exact=True, sock_timeout=20 * SLOW)
            took = time.monotonic() - t0
    ping.check("while the child of a start was held before its exec", TRACED_DAEMON_PING_LIMIT)
    assert took < 2 * SLOW, f"the start took {took:.1f} s"
    body = r.raw.decode(errors="replace")
    assert "traced (state t) before its exec" in body, body[-800:]
    assert b"never" not in r.stdout
    assert starts(ex)["child_given_up"] == 1
    # Untraced, the next one runs.
    run_ok(ex, 2)


def test_an_isolated_holder_stalled_before_its_exec_is_given_up_on(execd_factory, tmp_path):
    if not strace_available():
        pytest.skip("needs strace on this machine")
    ex = execd_factory("--isolated-allowed-paths", str(tmp_path))
    st, caps = ex.json("GET", "/v1/isolated/capabilities")  # the trial runs here, untraced
    assert st == 200, caps
    if not caps.get("available"):
        pytest.skip(f"isolation unavailable here: {caps.get('message')}")
    ws = tmp_path / "ws"
    ws.mkdir()
    body = {"workspace": {"path": str(ws), "mode": "rw"}}
    # The holder execs execd with execveat.
    with Tracer([ex.pid], f"execveat:delay_enter={STALL_US}", follow=True):
        with Pinger(ex) as ping:
            t0 = time.monotonic()
            st, _, text = ex.request("POST", "/v1/isolated/session", body, headers={"Content-Type": "application/json"},
                                     timeout=30 * SLOW)
            took = time.monotonic() - t0
    ping.check("while an isolated session's holder was held before its exec", TRACED_DAEMON_PING_LIMIT)
    assert st == 500, (st, text)
    assert b"traced (state t) before its exec" in text, text
    assert took < 2 * SLOW, f"the session's creation took {took:.1f} s"
    # Untraced, a session is made and runs.
    st, _, text = ex.request("POST", "/v1/isolated/session", body, headers={"Content-Type": "application/json"},
                             timeout=30 * SLOW)
    assert st == 201, text
    sid = json.loads(text)["session_id"]
    st, _, _ = ex.request("DELETE", f"/v1/isolated/session/{sid}")
    assert st == 200
