"""PTY benchmark (not a test): prints figures.

  * keystroke echo round trip through a PTY session (p50/p99),
  * PTY output throughput next to pipe throughput (exact-framing /command) for
    the same `head -c N /dev/urandom | base64`,
  * execd RSS with 200 idle PTY sessions (each shell started, client gone).

Usage: .venv/bin/python tests/bench/bench_pty.py [--mib 256] [--sessions 200]
(EXECD_BIN selects the binary; default build/execd.)
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from websockets.sync.client import connect  # noqa: E402

from execd_client import start_execd, vm_rss_kib  # noqa: E402


def create(ex, **body):
    st, js = ex.json("POST", "/pty", body)
    assert st == 201, (st, js)
    return js["session_id"]


def attach(ex, sid, **q):
    qs = "&".join(f"{k}={v}" for k, v in q.items())
    return connect(f"ws://127.0.0.1:{ex.port}/pty/{sid}/ws" + (f"?{qs}" if qs else ""),
                   additional_headers={"X-EXECD-ACCESS-TOKEN": ex.token}, max_size=None)


def wait_text(ws, kind):
    while True:
        m = ws.recv(timeout=30)
        if isinstance(m, str) and json.loads(m)["type"] == kind:
            return


def bench_echo(ex, n=2000):
    sid = create(ex, command="stty raw -echo 2>/dev/null; stty -icanon 2>/dev/null; cat")
    with attach(ex, sid) as ws:
        wait_text(ws, "connected")
        # Warm up until cat is reading.
        got = b""
        while b"w" not in got:
            ws.send(b"\x00w")
            try:
                m = ws.recv(timeout=0.2)
                if isinstance(m, bytes):
                    got += m[1:]
            except TimeoutError:
                pass
        samples = []
        for i in range(n):
            t0 = time.perf_counter()
            ws.send(b"\x00k")
            while True:
                m = ws.recv(timeout=10)
                if isinstance(m, bytes) and b"k" in m[1:]:
                    break
            samples.append((time.perf_counter() - t0) * 1e6)
    ex.request("DELETE", f"/pty/{sid}")
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


def bench_pty_throughput(ex, mib):
    sid = create(ex, command=f"head -c {mib}M /dev/urandom | base64; exit 0")
    total = 0
    t0 = time.perf_counter()
    with attach(ex, sid) as ws:
        try:
            while True:
                m = ws.recv(timeout=60)
                if isinstance(m, bytes):
                    total += len(m) - 1
        except Exception:
            pass
    dt = time.perf_counter() - t0
    return total, dt


def bench_pipe_throughput(ex, mib):
    c = http.client.HTTPConnection("127.0.0.1", ex.port, timeout=120)
    t0 = time.perf_counter()
    c.request("POST", "/command", body=json.dumps({"command": f"head -c {mib}M /dev/urandom | base64"}),
              headers=ex.headers({"Content-Type": "application/json", "Accept": "application/x-ndjson"}))
    r = c.getresponse()
    total = 0
    while True:
        chunk = r.read(1 << 20)
        if not chunk:
            break
        total += len(chunk)
    dt = time.perf_counter() - t0
    c.close()
    return total, dt


def bench_idle_sessions(ex, n):
    before = vm_rss_kib(ex.pid)
    ids = []
    for _ in range(n):
        sid = create(ex)
        with attach(ex, sid) as ws:
            wait_text(ws, "connected")
        ids.append(sid)
    after = vm_rss_kib(ex.pid)
    for sid in ids:
        ex.request("DELETE", f"/pty/{sid}")
    return before, after


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--keys", type=int, default=2000)
    a = ap.parse_args()
    ex = start_execd()
    try:
        p50, p99 = bench_echo(ex, a.keys)
        print(f"keystroke echo RTT through PTY ({a.keys} keys): p50 {p50:.0f} us, p99 {p99:.0f} us")
        n, dt = bench_pty_throughput(ex, a.mib)
        print(f"PTY output: {n / 1e6:.1f} MB in {dt:.2f} s = {n / dt / 1e6:.1f} MB/s "
              f"(head -c {a.mib}M /dev/urandom | base64, WebSocket 0x01 frames)")
        n, dt = bench_pipe_throughput(ex, a.mib)
        print(f"pipe /command exact framing: {n / 1e6:.1f} MB of stream in {dt:.2f} s = {n / dt / 1e6:.1f} MB/s")
        before, after = bench_idle_sessions(ex, a.sessions)
        print(f"RSS with {a.sessions} idle PTY sessions: {before} KiB -> {after} KiB "
              f"(+{(after - before) / a.sessions:.1f} KiB per session)")
    finally:
        ex.stop()


if __name__ == "__main__":
    main()
