#!/usr/bin/env python3
"""Benchmark for warm-pool binding (--runtime-init, POST /init; not a test).

    tests/bench/bench_runtime_init.py --execd build/execd [--rounds 15]

Alternates, in one run, a warm execd (started with --runtime-init and no
token, then bound) and a plain one (started with its token), each fresh,
and reports medians of:
  * idle RSS once listening (a warm sandbox should cost what an idle execd costs);
  * bind-to-first-command: POST /init (with the token's SHA-256), then the
    first `true` through POST /command to its terminal event, against the
    same first command on the plain execd (the floor).
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import re
import secrets
import statistics
import subprocess
import tempfile
import time

LISTEN_RE = re.compile(r"listening on ([0-9.]+):(\d+)")


def start(execd: str, args: list[str]) -> tuple[subprocess.Popen, int]:
    state = tempfile.mkdtemp(prefix="bench-init-")
    p = subprocess.Popen([execd, "--host", "127.0.0.1", "--port", "0", "--state-dir", state, *args],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        m = LISTEN_RE.search(line)
        if m:
            return p, int(m.group(2))
    raise SystemExit("execd did not start")


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def post(port: int, path: str, body: dict, token: str | None) -> tuple[int, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["X-EXECD-ACCESS-TOKEN"] = token
    c.request("POST", path, body=json.dumps(body), headers=headers)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def first_command(port: int, token: str) -> None:
    st, data = post(port, "/command", {"command": "true"}, token)
    assert st == 200 and b"execution_complete" in data, (st, data[:200])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--execd", required=True)
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()
    warm_rss, plain_rss, bind, init_only, floor = [], [], [], [], []
    for _ in range(a.rounds):
        token = secrets.token_hex(16)
        p, port = start(a.execd, ["--runtime-init"])
        time.sleep(0.2)  # settle before reading RSS (a figure, not a gate)
        warm_rss.append(rss_kib(p.pid))
        t0 = time.perf_counter()
        st, data = post(port, "/init", {"sandboxId": "bench", "generation": 1,
                                        "accessTokenHash": "sha256:" + hashlib.sha256(token.encode()).hexdigest()},
                        None)
        t1 = time.perf_counter()
        assert st == 200, data
        first_command(port, token)
        t2 = time.perf_counter()
        init_only.append((t1 - t0) * 1e3)
        bind.append((t2 - t0) * 1e3)
        p.terminate()
        p.wait(10)

        p, port = start(a.execd, ["--access-token", token])
        time.sleep(0.2)
        plain_rss.append(rss_kib(p.pid))
        t0 = time.perf_counter()
        first_command(port, token)
        floor.append((time.perf_counter() - t0) * 1e3)
        p.terminate()
        p.wait(10)
    med = statistics.median
    print(f"idle RSS: warm (--runtime-init, unbound) {med(warm_rss)} KiB, plain {med(plain_rss)} KiB, "
          f"ratio {med(warm_rss) / med(plain_rss):.2f}")
    print(f"POST /init alone: p50 {med(init_only):.2f} ms")
    print(f"bind-to-first-command p50 {med(bind):.2f} ms against the first command of a plain execd "
          f"{med(floor):.2f} ms: +{med(bind) - med(floor):.2f} ms, ratio {med(bind) / med(floor):.2f} "
          f"({a.rounds} alternating rounds)")


if __name__ == "__main__":
    main()
