"""Code interpreting: POST /code/context until the kernel is ready, execd start
to the first `1+1` result in a fresh default context, and the warm `1+1` round
trip (p50/p99) next to the same through jupyter_client from Python (the floor,
measured in the same run); RSS of execd plus one idle kernel."""

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
from execd_client import start_execd, vm_rss_kib  # noqa: E402


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--execd", default="build/execd")
    ap.add_argument("--runs", type=int, default=200)
    a = ap.parse_args()
    os.environ.update(env())

    t0 = time.perf_counter()
    ex = start_execd(binary=a.execd, env=env(), state_dir=tempfile.mkdtemp(prefix="bench-code-"))
    try:
        conn = http.client.HTTPConnection(ex.host, ex.port)
        code(conn, ex, {"code": "1+1"})
        first = time.perf_counter() - t0
        ready = []
        for _ in range(5):
            t = time.perf_counter()
            conn.request("POST", "/code/context", body='{"language":"python"}', headers=ex.headers())
            r = conn.getresponse()
            ctx = json.loads(r.read())["id"]
            ready.append(time.perf_counter() - t)
            conn.request("DELETE", f"/code/contexts/{ctx}", headers=ex.headers())
            conn.getresponse().read()
        warm = []
        for _ in range(a.runs):
            t = time.perf_counter()
            code(conn, ex, {"code": "1+1"})
            warm.append(time.perf_counter() - t)
        kernel = [int(p) for p in os.listdir("/proc") if p.isdigit() and
                  f"{ex.state_dir}/kernel-".encode() in Path(f"/proc/{p}/cmdline").read_bytes()]
        rss = vm_rss_kib(ex.pid) + sum(vm_rss_kib(p) for p in kernel)
        execd_rss = vm_rss_kib(ex.pid)
    finally:
        ex.stop()

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
    print(f"code: execd start -> first 1+1 result (fresh default context): {ms(first)}")
    print(f"code: POST /code/context -> ready kernel, median of 5: {ms(statistics.median(ready))}")
    print(f"code: warm 1+1 round trip p50 {ms(pct(warm, .5))} p99 {ms(pct(warm, .99))}; "
          f"jupyter_client floor p50 {ms(pct(floor, .5))} p99 {ms(pct(floor, .99))}; "
          f"ratio p50 {pct(warm, .5) / pct(floor, .5):.2f}x")
    print(f"code: RSS execd {execd_rss} KiB + one idle python kernel = {rss} KiB")


if __name__ == "__main__":
    main()
