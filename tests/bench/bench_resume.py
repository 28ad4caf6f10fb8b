#!/usr/bin/env python3
"""Benchmarks for resumable executions and the journal (issue 13). A report,
not a gate:

    python tests/bench/bench_resume.py --execd build/execd --client build/stream_client

  * resume cost: time from connecting to the first replayed stdout byte of
    GET /command/{id}/stream?stdout=<offset> (a finished 16 MiB command,
    random offsets in its last MiB), p50/p99, next to the floor measured the same way in the
    same run: GET /ping on a fresh connection (and, for comparison, the
    head of GET /command/{id}/logs?cursor=<offset>, which reads the rest of
    the same log before answering); each response is read to its end, untimed,
    before the next request;
  * journal overhead on the POST /command {"command":"true"} round trip
    (build/stream_client --rtt, one keep-alive connection): the same binary
    with and without --no-journal, interleaved rounds, medians;
  * the state dir after 10,000 commands: apparent bytes, disk usage, files.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time

TOKEN_HEADER = "X-EXECD-ACCESS-TOKEN"
LISTEN_RE = re.compile(rb"listening on ([0-9.]+):(\d+)")


class Daemon:
    def __init__(self, binary, *extra):
        self.token = secrets.token_hex(16)
        self.state_dir = tempfile.mkdtemp(prefix="execd-bench-resume-")
        self.proc = subprocess.Popen(
            [binary, "--host", "127.0.0.1", "--port", "0", "--access-token", self.token,
             "--state-dir", self.state_dir, *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.port = None
        while self.port is None:
            line = self.proc.stderr.readline()
            if not line:
                raise SystemExit("execd exited early")
            m = LISTEN_RE.search(line)
            if m:
                self.port = int(m.group(2))
        # Keep stderr drained.
        import threading
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()

    def request(self, method, path, body=b"", extra=""):
        s = socket.create_connection(("127.0.0.1", self.port))
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: b\r\nConnection: close\r\n{TOKEN_HEADER}: {self.token}\r\n"
                  f"{extra}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        data = bytearray()
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
        s.close()
        return bytes(data)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)
        shutil.rmtree(self.state_dir, ignore_errors=True)


def first_byte_ms(port, token, path, marker: bytes) -> float:
    """Connect, send a GET, return ms until `marker` has arrived. The rest of
    the response is read (untimed) until the server closes, so the next
    measurement does not pay for this connection's teardown."""
    t0 = time.perf_counter()
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: b\r\nConnection: close\r\n{TOKEN_HEADER}: {token}\r\n\r\n".encode())
    data = b""
    while marker not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise SystemExit(f"{path}: connection closed before {marker!r}: {data[:300]!r}")
        data += chunk
    dt = (time.perf_counter() - t0) * 1e3
    while s.recv(1 << 20):
        pass
    s.close()
    return dt


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round((len(v) - 1) * p / 100)))]


def bench_resume_cost(binary, runs):
    d = Daemon(binary)
    try:
        size = 16 << 20
        d.request("POST", "/command", json.dumps({"command": f"head -c {size} /dev/urandom | base64 -w 0",
                                                  "id": "resume-bench"}).encode())
        rng = random.Random(13)
        resume, logs, ping = [], [], []
        produced = (size + 2) // 3 * 4  # base64
        for _ in range(runs):
            # The last MiB: each replay is read to its end (see first_byte_ms).
            off = produced - 1 - rng.randrange(0, 1 << 20)
            # Interleaved, so drift hits all three alike.
            resume.append(first_byte_ms(d.port, d.token, f"/command/resume-bench/stream?stdout={off}",
                                        b'"type":"stdout"'))
            logs.append(first_byte_ms(d.port, d.token, f"/command/resume-bench/logs?cursor={off}", b"\r\n\r\n"))
            ping.append(first_byte_ms(d.port, d.token, "/ping", b"HTTP/1.1 200"))
        return {"resume_p50_ms": statistics.median(resume), "resume_p99_ms": pct(resume, 99),
                "logs_first_byte_p50_ms": statistics.median(logs), "ping_p50_ms": statistics.median(ping)}
    finally:
        d.stop()


def rtt(client, d, runs):
    return json.loads(subprocess.check_output([client, "--rtt", str(runs), str(d.port), d.token]))


def bench_journal_overhead(binary, client, runs, rounds):
    with_j, without_j = [], []
    for _ in range(rounds):
        for extra, out in (((), with_j), (("--no-journal",), without_j)):
            d = Daemon(binary, *extra)
            try:
                out.append(rtt(client, d, runs)["p50_us"])
            finally:
                d.stop()
    return {"with_journal_p50_us": statistics.median(with_j), "without_journal_p50_us": statistics.median(without_j),
            "ratio": statistics.median(with_j) / statistics.median(without_j), "rounds": rounds}


def bench_state_dir(binary, client, n):
    d = Daemon(binary)
    try:
        rtt(client, d, n)
        time.sleep(1.5)  # let record writes on the threadpool land
        files = os.listdir(d.state_dir)
        apparent = sum(os.path.getsize(os.path.join(d.state_dir, f)) for f in files)
        du = int(subprocess.check_output(["du", "-sk", d.state_dir]).split()[0])
        journal = os.path.getsize(os.path.join(d.state_dir, "journal.jsonl"))
        return {"commands": n, "files": len(files), "apparent_bytes": apparent, "disk_kib": du,
                "journal_bytes": journal}
    finally:
        d.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--execd", default="build/execd")
    ap.add_argument("--client", default="build/stream_client")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    q = a.quick
    rc = bench_resume_cost(a.execd, 50 if q else 300)
    print(f"resume cost: {json.dumps(rc)}", flush=True)
    jo = bench_journal_overhead(a.execd, a.client, 300 if q else 2000, 2 if q else 3)
    print(f"journal overhead: {json.dumps(jo)}", flush=True)
    sd = bench_state_dir(a.execd, a.client, 1000 if q else 10000)
    print(f"state dir: {json.dumps(sd)}", flush=True)
    print()
    print(f"{'figure':44} {'value':>12} {'floor':>12} {'ratio':>7}")
    print(f"{'resume: reconnect to first byte p50 (ms)':44} {rc['resume_p50_ms']:12.3f} "
          f"{rc['ping_p50_ms']:12.3f} {rc['resume_p50_ms'] / rc['ping_p50_ms']:7.2f}")
    print(f"{'  floor: GET /ping, fresh connection; /logs (ms)':44} {rc['logs_first_byte_p50_ms']:12.3f}")
    print(f"{'/command true round trip p50, journal (us)':44} {jo['with_journal_p50_us']:12.1f} "
          f"{jo['without_journal_p50_us']:12.1f} {jo['ratio']:7.2f}")
    print(f"{'state dir after %d commands (KiB on disk)' % sd['commands']:44} {sd['disk_kib']:12d}")
    print(f"{'  apparent bytes / files / journal bytes':44} {sd['apparent_bytes']:12d} {sd['files']:12d} "
          f"{sd['journal_bytes']:7d}")


if __name__ == "__main__":
    main()
