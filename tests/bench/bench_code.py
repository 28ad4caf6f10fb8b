"""Code interpreting, for each execd binary given (the dynamic and the
static build, or an older build to compare with), in the same run:
execd start to the first `1+1` result in a fresh default context, POST
/code/context until the kernel is ready, the warm `1+1` round trip (p50/p99,
the binaries' runs interleaved so machine load falls on all alike), and what
each kernel costs execd itself: threads, descriptors other than files and
RSS with four kernels against none. The floor is the same `1+1` through jupyter_client
from Python, measured in the same run.

    bench_code.py --execd build/execd [--static build/execd-static] [--binary LABEL=PATH ...]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integration"))
from execd_client import pids_with_cmdline, start_execd, vm_rss_kib, wait_until  # noqa: E402

KERNELS = 4


def env():
    e = dict(os.environ)
    e["PATH"] = f"{Path(sys.prefix) / 'bin'}:{e.get('PATH', '/usr/bin:/bin')}"
    e["JUPYTER_PATH"] = str(Path(sys.prefix) / "share" / "jupyter")
    return e


def code(conn, ex, body):
    conn.request("POST", "/code", body=json.dumps(body), headers=ex.headers({"Content-Type": "application/json"}))
    r = conn.getresponse()
    data = r.read()
    assert r.status == 200 and b'"result"' in data, data[:300]
    return data


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))]


def counts(pid):
    """Threads, descriptors that are not files (sockets, pipes, eventfds: what
    a kernel's connections cost; the runs' retained logs are files and come
    and go with retention), and RSS."""
    other = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            other += not os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/")
        except OSError:
            pass
    return (len(os.listdir(f"/proc/{pid}/task")), other, vm_rss_kib(pid))


class Subject:
    def __init__(self, label, binary):
        self.label, self.binary = label, binary
        self.warm: list[float] = []

    def start(self):
        t0 = time.perf_counter()
        self.ex = start_execd(binary=self.binary, env=env(), state_dir=tempfile.mkdtemp(prefix="bench-code-"))
        self.conn = http.client.HTTPConnection(self.ex.host, self.ex.port)
        idle = counts(self.ex.pid)
        code(self.conn, self.ex, {"code": "1+1"})
        self.first = time.perf_counter() - t0
        self.ready = []
        for _ in range(5):
            t = time.perf_counter()
            self.conn.request("POST", "/code/context", body='{"language":"python"}', headers=self.ex.headers())
            ctx = json.loads(self.conn.getresponse().read())["id"]
            self.ready.append(time.perf_counter() - t)
            self.conn.request("DELETE", f"/code/contexts/{ctx}", headers=self.ex.headers())
            self.conn.getresponse().read()
        # What kernels cost execd: none (after a first context came and went,
        # so one-time set-up is not counted) against KERNELS live ones.
        self.conn.request("DELETE", "/code/contexts?language=python", headers=self.ex.headers())
        self.conn.getresponse().read()
        wait_until(lambda: not pids_with_cmdline(f"{self.ex.state_dir}/kernel-"), 30, 0.05, "kernels to exit")
        before = counts(self.ex.pid)
        self.ctxs = []
        for _ in range(KERNELS):
            self.conn.request("POST", "/code/context", body='{"language":"python"}', headers=self.ex.headers())
            ctx = json.loads(self.conn.getresponse().read())["id"]
            code(self.conn, self.ex, {"code": "1+1", "context": {"id": ctx}})
            self.ctxs.append(ctx)
        after = counts(self.ex.pid)
        self.idle = idle
        self.per_kernel = [(a - b) / KERNELS for a, b in zip(after, before)]
        self.with_kernels = after

    def round(self, n):
        ctx = self.ctxs[0]
        for _ in range(n):
            t = time.perf_counter()
            code(self.conn, self.ex, {"code": "1+1", "context": {"id": ctx}})
            self.warm.append(time.perf_counter() - t)

    def stop(self):
        self.ex.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--execd", default="build/execd")
    ap.add_argument("--static", default=None, help="the static build, measured beside --execd")
    ap.add_argument("--binary", action="append", default=[], help="LABEL=PATH, another execd to compare")
    ap.add_argument("--runs", type=int, default=200)
    a = ap.parse_args()
    os.environ.update(env())

    subjects = [Subject("dynamic", a.execd)]
    if a.static and Path(a.static).exists():
        subjects.append(Subject("static", a.static))
    for spec in a.binary:
        label, _, path = spec.partition("=")
        subjects.append(Subject(label, path))
    try:
        for s in subjects:
            s.start()
        rounds = 10
        for _ in range(rounds):
            for s in subjects:
                s.round(max(1, a.runs // rounds))
    finally:
        for s in subjects:
            s.stop()

    from jupyter_client.manager import start_new_kernel
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        floor = []
        for _ in range(a.runs):
            t = time.perf_counter()
            kc.execute_interactive("1+1", output_hook=lambda m: None, timeout=30)
            floor.append(time.perf_counter() - t)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)

    ms = lambda s: f"{s * 1000:.2f} ms"  # noqa: E731
    print(f"code: jupyter_client floor, warm 1+1 p50 {ms(pct(floor, .5))} p99 {ms(pct(floor, .99))}")
    for s in subjects:
        size = Path(s.binary).stat().st_size
        print(f"code [{s.label}] {s.binary} ({size / 1e6:.2f} MB)")
        print(f"  execd start -> first 1+1 result (fresh default context): {ms(s.first)}")
        print(f"  POST /code/context -> ready kernel, median of 5: {ms(statistics.median(s.ready))}")
        print(f"  warm 1+1 round trip p50 {ms(pct(s.warm, .5))} p99 {ms(pct(s.warm, .99))}; "
              f"ratio to the floor p50 {pct(s.warm, .5) / pct(floor, .5):.2f}x")
        t, f, r = s.idle
        print(f"  idle execd: {t} threads, {f} descriptors besides files, RSS {r} KiB")
        t, f, r = s.per_kernel
        print(f"  per kernel (execd itself, {KERNELS} kernels vs none): +{t:.1f} threads, +{f:.1f} descriptors "
              f"(sockets, pipes, eventfds), +{r:.0f} KiB RSS; with {KERNELS}: {s.with_kernels[0]} threads, "
              f"{s.with_kernels[1]} such descriptors")


if __name__ == "__main__":
    main()
