#!/usr/bin/env python3
"""execd benchmarks (not a test: prints figures and a target table).

    python tests/bench/bench.py --execd build/execd --floor build/spawn_floor [--quick]

Measures, against a release execd:
  * exec round trip of POST /command {"command":"true"} over one keep-alive
    connection (p50/p99), next to the floor: posix_spawn+wait of `bash -c true`
    (build/spawn_floor N bash_path);
  * stdout throughput in exact framing for `head -c 1G /dev/urandom | base64`
    (response bytes are only counted), next to the floor
    `bash -c 'head -c 1G /dev/urandom | base64 | cat > /dev/null'` timed in the same run;
  * idle RSS of a fresh execd;
  * start-up time: spawn until the first successful GET /ping (tight connect loop);
  * 1,000 concurrent foreground commands (`sleep 1; echo done`): errors and peak RSS.
Exit status is 0 even when a target is missed (it is a report, not a gate).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import re
import resource
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

TOKEN_HEADER = "X-EXECD-ACCESS-TOKEN"
LISTEN_RE = re.compile(rb"listening on ([0-9.]+):(\d+)")


def vm_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def pct(values, p):
    v = sorted(values)
    if not v:
        return float("nan")
    k = (len(v) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


class Daemon:
    def __init__(self, binary, *extra):
        self.token = secrets.token_hex(16)
        self.proc = subprocess.Popen(
            [binary, "--host", "127.0.0.1", "--port", "0", "--access-token", self.token, *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.port = None
        self.errlog = bytearray()
        deadline = time.monotonic() + 20
        while self.port is None:
            line = self.proc.stderr.readline()
            if not line:
                raise SystemExit(f"execd exited early: {self.errlog.decode(errors='replace')}")
            self.errlog += line
            m = LISTEN_RE.search(line)
            if m:
                self.port = int(m.group(2))
            if time.monotonic() > deadline:
                raise SystemExit("execd did not report its port")
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.errlog += line

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


# ---------------------------------------------------------------- round trip
def bench_round_trip(binary, floor, bash, runs):
    d = Daemon(binary)
    try:
        c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
        body = b'{"command":"true"}'
        hdr = {TOKEN_HEADER: d.token, "Content-Type": "application/json"}
        lat = []
        bad = 0
        for i in range(runs + 20):
            t0 = time.perf_counter()
            c.request("POST", "/command", body=body, headers=hdr)
            r = c.getresponse()
            data = r.read()
            dt = time.perf_counter() - t0
            if r.status != 200 or b'"execution_complete"' not in data:
                bad += 1
            if i >= 20:  # warm-up
                lat.append(dt * 1e6)
        c.close()
    finally:
        d.stop()
    fl = json.loads(subprocess.check_output([floor, str(runs), bash]))
    return {"p50_us": pct(lat, 50), "p99_us": pct(lat, 99), "errors": bad,
            "floor_p50_us": fl["p50_us"], "floor_p99_us": fl["p99_us"]}


# ---------------------------------------------------------------- throughput
def bench_throughput(binary, size_spec):
    cmd = f"head -c {size_spec} /dev/urandom | base64"
    t0 = time.perf_counter()
    subprocess.run(["bash", "-c", f"{cmd} | cat > /dev/null"], check=True)
    floor_s = time.perf_counter() - t0

    d = Daemon(binary)
    try:
        s = socket.create_connection(("127.0.0.1", d.port))
        body = json.dumps({"command": cmd}).encode()
        req = (b"POST /command HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n"
               b"Accept: application/x-ndjson\r\nContent-Type: application/json\r\n"
               + f"{TOKEN_HEADER}: {d.token}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        total = 0
        tail = b""
        t0 = time.perf_counter()
        s.sendall(req)
        while True:
            n = s.recv_into(view)
            if n == 0:
                break
            total += n
            if n >= 8192:
                tail = bytes(view[n - 8192:n])
            else:
                tail = (tail + bytes(view[:n]))[-8192:]
            if tail.endswith(b"\r\n0\r\n\r\n") and b'"execution_complete"' in tail:
                break
        execd_s = time.perf_counter() - t0
        s.close()
    finally:
        d.stop()
    payload = None
    m = re.search(rb'"stdout_bytes":(\d+)', tail)
    if m:
        payload = int(m.group(1))
    return {"execd_s": execd_s, "floor_s": floor_s, "response_bytes": total,
            "stdout_bytes": payload,
            "execd_mb_s": (payload or 0) / execd_s / 1e6, "floor_mb_s": (payload or 0) / floor_s / 1e6}


# ---------------------------------------------------------------- idle RSS / start-up
def bench_idle_rss(binary):
    d = Daemon(binary)
    try:
        c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=5)
        c.request("GET", "/ping")
        c.getresponse().read()
        c.close()
        return vm_rss_kib(d.proc.pid)
    finally:
        d.stop()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def bench_startup(binary, runs):
    times = []
    for _ in range(runs):
        port = free_port()
        t0 = time.perf_counter()
        p = subprocess.Popen([binary, "--host", "127.0.0.1", "--port", str(port),
                              "--access-token", "t", "--log-level", "warn"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        ok = False
        deadline = t0 + 10
        while time.perf_counter() < deadline:
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=1)
            except OSError:
                if p.poll() is not None:
                    break
                continue
            try:
                s.sendall(b"GET /ping HTTP/1.1\r\nHost: b\r\n\r\n")
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    ok = True
            except OSError:
                pass
            finally:
                s.close()
            if ok:
                break
        dt = time.perf_counter() - t0
        p.send_signal(signal.SIGTERM)
        p.wait(10)
        if ok:
            times.append(dt * 1e3)
    return {"median_ms": statistics.median(times) if times else float("nan"),
            "min_ms": min(times) if times else float("nan"), "ok": len(times), "runs": runs}


# ---------------------------------------------------------------- concurrency
async def _one(port, token, body, errors, timeout):
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
        w.write(b"POST /command HTTP/1.1\r\nHost: b\r\nConnection: close\r\n"
                + f"{TOKEN_HEADER}: {token}\r\nAccept: application/x-ndjson\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        await w.drain()
        data = bytearray()
        async def read_all():
            while True:
                chunk = await r.read(65536)
                if not chunk:
                    return
                data.extend(chunk)
                if data.endswith(b"\r\n0\r\n\r\n") and b'"execution_complete"' in data[-4096:]:
                    return
        await asyncio.wait_for(read_all(), timeout)
        w.close()
        ok = (data.startswith(b"HTTP/1.1 200") and b'"text":"done\\n"' in data
              and b'"exit_code":0' in data)
        if not ok:
            errors.append(bytes(data[:300]))
    except Exception as e:  # noqa: BLE001 - every failure is counted
        errors.append(repr(e).encode())


def bench_concurrent(binary, n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 8 * n + 1000))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    d = Daemon(binary)  # inherits the raised limit
    peak = [vm_rss_kib(d.proc.pid)]
    base = peak[0]
    stop = threading.Event()

    def sampler():
        while not stop.is_set():
            try:
                peak[0] = max(peak[0], vm_rss_kib(d.proc.pid))
            except OSError:
                return
            stop.wait(0.02)
    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    errors: list[bytes] = []
    body = json.dumps({"command": "sleep 1; echo done"}).encode()

    async def main():
        await asyncio.gather(*[_one(d.port, d.token, body, errors, 120) for _ in range(n)])
    t0 = time.perf_counter()
    try:
        asyncio.run(main())
    finally:
        wall = time.perf_counter() - t0
        stop.set()
        th.join()
        rc = d.stop()
    return {"errors": len(errors), "sample_errors": [e[:160] for e in errors[:3]],
            "peak_rss_kib": peak[0], "base_rss_kib": base, "wall_s": wall, "exit": rc}


# ---------------------------------------------------------------- report
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--execd", default="build/execd")
    ap.add_argument("--floor", default="build/spawn_floor")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (smoke run)")
    ap.add_argument("--only", default="", help="comma list: rtt,throughput,rss,startup,concurrent")
    ap.add_argument("--static", default="", help="also measure idle RSS and start-up of this (static) binary")
    a = ap.parse_args()
    binary = os.path.abspath(a.execd)
    floor = os.path.abspath(a.floor)
    bash = shutil.which("bash") or "/bin/bash"
    only = set(filter(None, a.only.split(",")))
    want = lambda k: not only or k in only  # noqa: E731
    runs = 100 if a.quick else 500
    size = "128M" if a.quick else "1G"
    conc = 200 if a.quick else 1000

    rows = []  # (metric, execd, floor, ratio, target, ok)
    if want("rtt"):
        rt = bench_round_trip(binary, floor, bash, runs)
        print(f"round trip ({runs} runs): {json.dumps(rt)}", flush=True)
        r50 = rt["p50_us"] / rt["floor_p50_us"]
        rows.append(("round trip p50 (us)", f"{rt['p50_us']:.0f}", f"{rt['floor_p50_us']:.0f}",
                     f"{r50:.2f}x", "<= 1.5x floor", r50 <= 1.5 and rt["errors"] == 0))
        rows.append(("round trip p99 (us)", f"{rt['p99_us']:.0f}", f"{rt['floor_p99_us']:.0f}",
                     f"{rt['p99_us'] / rt['floor_p99_us']:.2f}x", "-", None))
    if want("throughput"):
        tp = bench_throughput(binary, size)
        print(f"throughput ({size} urandom | base64): {json.dumps(tp)}", flush=True)
        ratio = tp["floor_s"] / tp["execd_s"]
        rows.append((f"stdout MB/s ({size}, exact)", f"{tp['execd_mb_s']:.0f}", f"{tp['floor_mb_s']:.0f}",
                     f"{ratio:.2f}x", ">= 0.5x floor", ratio >= 0.5 and bool(tp["stdout_bytes"])))
    # The static binary is what images ship (make static); the dynamic one
    # maps whole shared libraries (libcrypto, libstdc++) into its RSS.
    variants = [("", binary)] + ([(" [static]", os.path.abspath(a.static))] if a.static else [])
    for label, path in variants:
        if want("rss"):
            rss = bench_idle_rss(path)
            print(f"idle RSS{label}: {rss} KiB", flush=True)
            rows.append((f"idle RSS (MiB){label}", f"{rss / 1024:.2f}", "-", "-", "< 4 MiB", rss < 4 * 1024))
        if want("startup"):
            su = bench_startup(path, 10 if a.quick else 30)
            print(f"start-up{label}: {json.dumps(su)}", flush=True)
            rows.append((f"start-up to /ping (ms){label}", f"{su['median_ms']:.2f}", "-", "-", "< 10 ms",
                         su["median_ms"] < 10 and su["ok"] == su["runs"]))
    if want("concurrent"):
        cc = bench_concurrent(binary, conc)
        print(f"{conc} concurrent: {json.dumps(cc, default=str)}", flush=True)
        rows.append((f"{conc} concurrent: errors", str(cc["errors"]), "-", "-", "0", cc["errors"] == 0))
        rows.append((f"{conc} concurrent: peak RSS (MiB)", f"{cc['peak_rss_kib'] / 1024:.1f}", "-", "-",
                     "< 64 MiB", cc["peak_rss_kib"] < 64 * 1024))
        rows.append((f"{conc} concurrent: wall (s)", f"{cc['wall_s']:.2f}", "-", "-", "-", None))

    hdr = ("metric", "execd", "floor", "ratio", "target", "met")
    table = [hdr] + [(m, e, f, r, t, "-" if ok is None else ("yes" if ok else "NO"))
                     for m, e, f, r, t, ok in rows]
    w = [max(len(row[i]) for row in table) for i in range(len(hdr))]
    print()
    for i, row in enumerate(table):
        print("  ".join(c.ljust(w[j]) for j, c in enumerate(row)))
        if i == 0:
            print("  ".join("-" * x for x in w))


if __name__ == "__main__":
    sys.exit(main())
