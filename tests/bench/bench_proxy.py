#!/usr/bin/env python3
"""Benchmark for /proxy/{port} (not a test).

    tests/bench/bench_proxy.py --execd build/execd [--requests 5000] [--size-mib 1024]

Starts a small threaded service on loopback (a fixed 2-byte answer for small
GETs; a SIZE file pushed with os.sendfile for the download) and a fresh
execd, then measures, in the same run, each against the same service:
  * small GETs on one keep-alive connection: requests/s, p50 and p99
    latency, direct vs through execd;
  * a SIZE download (recv_into a reused buffer, discarded): MB/s, direct vs
    through execd.
Targets: proxied p50 and p99 within 1.3x direct + 100 us; download >= 0.8x direct.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

MiB = 1 << 20
LISTEN_RE = re.compile(r"listening on ([0-9.]+):(\d+)")


class Service(threading.Thread):
    """One thread per connection: a head in, an answer out, keep-alive."""

    def __init__(self, big_path: str, big_size: int):
        super().__init__(daemon=True)
        self.big_path, self.big_size = big_path, big_size
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]

    def run(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c: socket.socket):
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    piece = c.recv(65536)
                    if not piece:
                        return
                    buf += piece
                head, _, buf = buf.partition(b"\r\n\r\n")
                target = head.split(b" ", 2)[1]
                if target.startswith(b"/big"):
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % self.big_size)
                    with open(self.big_path, "rb") as f:
                        sent = 0
                        while sent < self.big_size:
                            sent += os.sendfile(c.fileno(), f.fileno(), sent, self.big_size - sent)
                else:
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok")
        except OSError:
            pass
        finally:
            c.close()


def read_response(s: socket.socket, pending: bytearray, sink: bytearray | None = None) -> int:
    """Reads one Content-Length response; returns the body size."""
    while b"\r\n\r\n" not in pending:
        piece = s.recv(65536)
        if not piece:
            raise RuntimeError("closed")
        pending += piece
    end = pending.index(b"\r\n\r\n")
    head = bytes(pending[:end]).lower()
    del pending[:end + 4]
    m = re.search(rb"content-length: *(\d+)", head)
    length = int(m.group(1))
    if not head.startswith(b"http/1.1 200"):
        raise RuntimeError(head.decode(errors="replace"))
    have = min(len(pending), length)
    del pending[:have]
    left = length - have
    buf = sink if sink is not None else bytearray(MiB)
    view = memoryview(buf)
    while left:
        n = s.recv_into(view, min(left, len(buf)))
        if n == 0:
            raise RuntimeError("closed mid-body")
        left -= n
    return length


def small_gets(port: int, path: str, token: str | None, n: int) -> tuple[float, float, float]:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    req = f"GET {path} HTTP/1.1\r\nHost: bench\r\n" + (f"X-EXECD-ACCESS-TOKEN: {token}\r\n" if token else "") + "\r\n"
    req = req.encode()
    pending = bytearray()
    sink = bytearray(4096)
    for _ in range(200):  # warm up (and fill execd's keep-alive pool)
        s.sendall(req)
        read_response(s, pending, sink)
    lat = []
    t0 = time.perf_counter()
    for _ in range(n):
        a = time.perf_counter()
        s.sendall(req)
        read_response(s, pending, sink)
        lat.append(time.perf_counter() - a)
    total = time.perf_counter() - t0
    s.close()
    lat.sort()
    return n / total, lat[len(lat) // 2] * 1e6, lat[int(len(lat) * 0.99)] * 1e6


def download(port: int, path: str, token: str | None) -> float:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * MiB)
    req = f"GET {path} HTTP/1.1\r\nHost: bench\r\n" + (f"X-EXECD-ACCESS-TOKEN: {token}\r\n" if token else "") + "\r\n"
    t0 = time.perf_counter()
    s.sendall(req.encode())
    size = read_response(s, bytearray())
    dt = time.perf_counter() - t0
    s.close()
    return size / dt / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--execd", default="build/execd")
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    size = args.size_mib * MiB
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # run the cleanup below
    tmp = tempfile.mkdtemp(prefix="bench-proxy-")
    big = os.path.join(tmp, "big")
    try:
        run(args, size, big)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(args, size: int, big: str):
    with open(big, "wb") as f:
        block = os.urandom(MiB)
        for _ in range(args.size_mib):
            f.write(block)
    svc = Service(big, size)
    svc.start()

    token = secrets.token_hex(16)
    proc = subprocess.Popen([args.execd, "--host", "127.0.0.1", "--port", "0", "--access-token", token], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    port = None
    for raw in proc.stderr:
        m = LISTEN_RE.search(raw.decode(errors="replace"))
        if m:
            port = int(m.group(2))
            break
    threading.Thread(target=lambda: proc.stderr.read(), daemon=True).start()
    if port is None:
        sys.exit("execd did not start")
    ok = True
    try:
        prefix = f"/proxy/{svc.port}"
        rows = {"direct": [], "proxied": []}
        for _ in range(args.rounds):  # interleaved, medians: the machine is shared
            rows["direct"].append(small_gets(svc.port, "/small", None, args.requests))
            rows["proxied"].append(small_gets(port, prefix + "/small", token, args.requests))
        med = {k: tuple(statistics.median(r[i] for r in v) for i in range(3)) for k, v in rows.items()}
        (d_rps, d_p50, d_p99), (p_rps, p_p50, p_p99) = med["direct"], med["proxied"]
        print(f"small GET, {args.requests} sequential on one connection, median of {args.rounds} rounds:")
        print(f"  direct : {d_rps:9.0f} req/s  p50 {d_p50:7.1f} us  p99 {d_p99:7.1f} us")
        print(f"  proxied: {p_rps:9.0f} req/s  p50 {p_p50:7.1f} us  p99 {p_p99:7.1f} us")
        for name, d, p in (("p50", d_p50, p_p50), ("p99", d_p99, p_p99)):
            limit = 1.3 * d + 100
            good = p <= limit
            ok &= good
            print(f"  {name}: proxied {p:.1f} us vs target {limit:.1f} us (1.3x direct + 100 us): "
                  f"{'ok' if good else 'MISSED'}")

        dl = {"direct": [], "proxied": []}
        for _ in range(args.rounds):
            dl["direct"].append(download(svc.port, "/big", None))
            dl["proxied"].append(download(port, prefix + "/big", token))
        d_mb, p_mb = statistics.median(dl["direct"]), statistics.median(dl["proxied"])
        ratio = p_mb / d_mb
        good = ratio >= 0.8
        ok &= good
        print(f"download {args.size_mib} MiB, median of {args.rounds}: direct {d_mb:.0f} MB/s, "
              f"proxied {p_mb:.0f} MB/s = {ratio:.2f}x (target >= 0.8x): {'ok' if good else 'MISSED'}")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        svc.sock.close()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
